#!/usr/bin/env python3
"""Load checks of `gem4 serve`, A against B in one run on one machine (standard library only).

  spec    tokens/s per slot with and without speculation (--spec none vs --spec KINDS) on a repetitive
          prompt: each server gets the same requests, one after another, greedy.
  system  a long shared system prompt followed by different user turns: time to first token and
          cached_tokens of the first request, of later ones after the sliding window moved past the
          prefix (a long reply in between), and after a restart with the same --prompt-cache.

Examples:
  scripts/serve_load.py spec   -m e2b.gguf --spec ngram --requests 6 --max-tokens 128
  scripts/serve_load.py system -m e2b.gguf --system-tokens 2000 --turns 4
"""
import argparse
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, binary, args):
        self.port = free_port()
        self.log = tempfile.NamedTemporaryFile(prefix="gem4-serve-", suffix=".log", delete=False)
        self.proc = subprocess.Popen([binary, "serve", "--port", str(self.port)] + args, stdout=self.log,
                                     stderr=subprocess.STDOUT)
        deadline = time.time() + 600
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit("gem4 serve exited:\n" + open(self.log.name).read())
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=1).read()
                return
            except Exception:
                time.sleep(0.2)
        raise SystemExit("gem4 serve did not start")

    def post(self, path, body, timeout=3600):
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())

    def stream(self, path, body):
        """Returns (seconds to the first text chunk, the final usage)."""
        body = dict(body, stream=True, stream_options={"include_usage": True})
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        t0 = time.time()
        first, usage = None, None
        with urllib.request.urlopen(req, timeout=3600) as r:
            for raw in r:
                line = raw.decode().strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                c = json.loads(line[6:])
                if c.get("usage"):
                    usage = c["usage"]
                if first is None and c.get("choices") and c["choices"][0].get("text"):
                    first = time.time() - t0
        return first, usage

    def metrics(self):
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics").read().decode()
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#") and "{" not in line:
                k, v = line.split()
                out[k] = float(v)
        return out

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=120)


def vocab_tokens(n, seed, lo=1000, hi=30000):
    rng = random.Random(seed)
    return [rng.randrange(lo, hi) for _ in range(n)]


def cmd_spec(a):
    # A repetitive prompt: a 40-token phrase repeated, so the n-gram drafter finds long matches.
    phrase = vocab_tokens(40, 1)
    prompt = [2] + phrase * 12
    rows = []
    for spec in ["none", a.spec]:
        args = ["-m", a.model, "-t", str(a.threads), "--spec", spec, "--draft-max", str(a.draft_max)]
        if a.model_draft:
            args += ["-md", a.model_draft]
        srv = Server(a.binary, args)
        srv.post("/v1/completions", {"prompt": prompt[:64], "max_tokens": 4, "temperature": 0})  # warm-up
        rates, texts, accepted = [], [], 0
        for i in range(a.requests):
            t0 = time.time()
            r = srv.post("/v1/completions", {"prompt": prompt, "max_tokens": a.max_tokens, "temperature": 0})
            dt = time.time() - t0
            n = r["usage"]["completion_tokens"]
            accepted += r["usage"]["completion_tokens_details"]["accepted_prediction_tokens"]
            rates.append(n / dt)
            texts.append(r["choices"][0]["text"])
        srv.stop()
        rates.sort()
        rows.append((spec, rates[len(rates) // 2], accepted, texts))
    base, spec = rows[0], rows[1]
    print(f"requests: {a.requests} x {a.max_tokens} tokens, prompt {len(prompt)} tokens (repetitive), greedy")
    for name, rate, acc, _ in rows:
        print(f"  --spec {name:10s} {rate:8.2f} tokens/s per request (median, prompt included), accepted drafts {acc}")
    print(f"  ratio {spec[1] / base[1]:.2f}x; identical text: {spec[3] == base[3]}")


def cmd_system(a):
    system = vocab_tokens(a.system_tokens, 2)
    turns = [vocab_tokens(30, 100 + i) for i in range(a.turns + 2)]
    cache = tempfile.mkdtemp(prefix="gem4-prompt-cache-")
    args = ["-m", a.model, "-t", str(a.threads), "--parallel", "1", "--prompt-cache", cache, "--ctx",
            str(a.ctx)]
    no_eog = {"1": -100, "106": -100}

    def ask(srv, turn, max_tokens):
        return srv.stream("/v1/completions", {"prompt": [2] + system + turns[turn], "max_tokens": max_tokens,
                                              "temperature": 0, "logit_bias": no_eog})

    srv = Server(a.binary, args)
    srv.post("/v1/completions", {"prompt": vocab_tokens(16, 9), "max_tokens": 2, "temperature": 0})  # warm-up
    first_ttft, u = ask(srv, 0, a.reply_tokens)
    print(f"system prompt {a.system_tokens} tokens + 30-token user turns; first reply {a.reply_tokens} tokens "
          f"(moves the sliding window past the prefix)")
    print(f"  request 1: TTFT {first_ttft * 1e3:8.1f} ms, cached {u['prompt_tokens_details']['cached_tokens']}"
          f" of {u['prompt_tokens']}")
    worst = 0
    for t in range(1, a.turns + 1):
        ttft, u = ask(srv, t, 8)
        worst = max(worst, ttft)
        print(f"  request {t + 1}: TTFT {ttft * 1e3:8.1f} ms ({ttft / first_ttft * 100:5.1f} % of the first), "
              f"cached {u['prompt_tokens_details']['cached_tokens']} of {u['prompt_tokens']}")
    m = srv.metrics()
    print(f"  prefix store {m.get('gem4_prefix_store_bytes', 0) / 2**20:.1f} MiB, prompt cache "
          f"{m.get('gem4_prompt_cache_bytes', 0) / 2**20:.1f} MiB on disk")
    srv.stop()
    srv = Server(a.binary, args)
    srv.post("/v1/completions", {"prompt": vocab_tokens(16, 9), "max_tokens": 2, "temperature": 0})
    ttft, u = ask(srv, a.turns + 1, 8)
    worst = max(worst, ttft)
    print(f"  after a restart: TTFT {ttft * 1e3:8.1f} ms ({ttft / first_ttft * 100:5.1f} % of the first), "
          f"cached {u['prompt_tokens_details']['cached_tokens']} of {u['prompt_tokens']}")
    srv.stop()
    shutil.rmtree(cache, ignore_errors=True)
    print(f"  worst later TTFT: {worst / first_ttft * 100:.1f} % of the first")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["spec", "system"])
    p.add_argument("-m", "--model", required=True)
    p.add_argument("-md", "--model-draft")
    p.add_argument("--binary", default=os.path.join(os.path.dirname(__file__), "..", "build", "bin", "gem4"))
    p.add_argument("-t", "--threads", type=int, default=os.cpu_count())
    p.add_argument("--spec", default="ngram")
    p.add_argument("--draft-max", type=int, default=3)
    p.add_argument("--requests", type=int, default=5)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--system-tokens", type=int, default=2000)
    p.add_argument("--turns", type=int, default=3)
    p.add_argument("--reply-tokens", type=int, default=1200)
    p.add_argument("--ctx", type=int, default=4096)
    a = p.parse_args()
    {"spec": cmd_spec, "system": cmd_system}[a.what](a)


if __name__ == "__main__":
    sys.exit(main())
