#!/usr/bin/env python3
"""Load checks of `gem4 serve`, A against B in one run on one machine (standard library only).

  spec    tokens/s per slot with and without speculation (--spec none vs --spec KINDS) on a repetitive
          prompt: each server gets the same requests, one after another, greedy.
  system  a long shared system prompt followed by different user turns: time to first token and
          cached_tokens of the first request, of later ones after the sliding window moved past the
          prefix (a long reply in between), and after a restart with the same --prompt-cache.
  replicas  scripts/replicas.sh with N replicas behind nginx, once per policy (affinity, then
          round-robin): C conversations (each its own user and ~250-token history) x T turns, K requests
          at a time (each turn a think time after the conversation's previous reply), streaming; every
          stream must complete. Prints the share of prompt tokens served
          from cache per policy and their ratio. Then (--kill) an affinity run in which one replica is
          killed mid-run: no request that had not started streaming may fail.

Examples:
  scripts/serve_load.py spec   -m e2b.gguf --spec ngram --requests 6 --max-tokens 128
  scripts/serve_load.py system -m e2b.gguf --system-tokens 2000 --turns 4
  scripts/serve_load.py replicas -m tiny-gemma4-f32.gguf --text valid.txt --conversations 33 --clients 4
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
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


class Replicas:
    """scripts/replicas.sh in the background; knows the replicas' pids."""

    def __init__(self, a, policy):
        self.port = free_port()
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "replicas.sh")
        cmd = ["bash", script, "--model", a.model, "--replicas", str(a.replicas), "--port", str(self.port),
               "--policy", policy, "--gem4", a.binary, "--", "-t", "1", "--parallel", str(a.parallel),
               "--cache-ram", str(a.cache_ram)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.pids, self.ports, self.log = [], [], []
        for line in self.proc.stdout:
            self.log.append(line)
            m = re.match(r"replicas: replica \d+ pid (\d+) on http://127.0.0.1:(\d+)", line)
            if m:
                self.pids.append(int(m.group(1)))
                self.ports.append(int(m.group(2)))
            if line.startswith("replicas: ready"):
                break
        else:
            raise SystemExit("replicas.sh did not start:\n" + "".join(self.log))
        threading.Thread(target=lambda: [self.log.append(l) for l in self.proc.stdout], daemon=True).start()

    def store_mib(self):
        """Each live replica's prefix store size (MiB)."""
        out = []
        for port in self.ports:
            try:
                text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
                m = re.search(r"^gem4_prefix_store_bytes (\S+)", text, re.M)
                out.append(float(m.group(1)) / 2**20 if m else 0.0)
            except Exception:
                out.append(None)
        return out

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=120)


def chat_stream(port, body):
    """One streamed chat request. Returns (text, usage, started, upstream, error): started tells whether
    the response had begun (status and headers received) before an error; until then a proxy may retry
    the request elsewhere, after it no one can. upstream: the replica nginx chose (X-Gem4-Upstream)."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions",
                                 data=json.dumps(dict(body, stream=True, stream_options={"include_usage": True})).encode(),
                                 headers={"Content-Type": "application/json"})
    text, usage, started, done, upstream = [], None, False, False, None
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            started = True
            upstream = r.headers.get("X-Gem4-Upstream")
            for raw in r:
                line = raw.decode().strip()
                if line == "data: [DONE]":
                    done = True
                    continue
                if not line.startswith("data: "):
                    continue
                c = json.loads(line[6:])
                if c.get("usage"):
                    usage = c["usage"]
                if c.get("choices"):
                    piece = c["choices"][0].get("delta", {}).get("content")
                    if piece:
                        text.append(piece)
    except Exception as e:  # connection reset by a killed replica, HTTP errors
        return "".join(text), usage, started, upstream, f"{type(e).__name__}: {e}"
    if not done or usage is None:
        return "".join(text), usage, started, upstream, "stream ended without [DONE] and usage"
    return "".join(text), usage, started, upstream, None


def run_conversations(a, port, on_progress=None):
    """C conversations x T turns, K requests in flight at a time. Returns per-request records.

    Users, not clients, own the conversations: each of the K clients sends the turn of whichever
    conversation has been ready longest, and a conversation is ready again a think time after its
    previous reply (exponential, mean --think-ms, seeded). So a conversation's turns arrive among
    everyone else's as independent users' do. (K clients each driving their own conversations back to
    back, with no think time, move in step: round robin then sends every client's turns to the same
    replica again and again, and caches as well as affinity by accident.)"""
    words = open(a.text).read().split()
    rng = random.Random(7)
    convs = []
    for c in range(a.conversations):
        start = rng.randrange(0, len(words) - a.history_words)
        convs.append((f"user-{c:03d}", " ".join(words[start:start + a.history_words])))
    order = list(range(len(convs)))
    rng.shuffle(order)
    t0 = time.time()
    # (ready time, tie-break, conversation, turn, messages): all first turns ready at once, shuffled.
    ready = [(t0, n, c, 0, [{"role": "user", "content": convs[c][1]}]) for n, c in enumerate(order)]
    records, cv, in_flight = [], threading.Condition(), [0]
    seq = [len(ready)]

    def client():
        while True:
            with cv:
                while True:
                    if not ready and not in_flight[0]:
                        cv.notify_all()
                        return
                    if ready:
                        ready.sort()
                        wait = ready[0][0] - time.time()
                        if wait <= 0:
                            _, _, c, turn, messages = ready.pop(0)
                            in_flight[0] += 1
                            break
                        cv.wait(wait)
                    else:
                        cv.wait()
            user = convs[c][0]
            body = {"user": user, "messages": messages, "max_tokens": a.max_tokens, "temperature": 0}
            text, usage, started, upstream, err = chat_stream(port, body)
            with cv:
                records.append({"user": user, "turn": turn, "usage": usage, "started": started, "error": err,
                                "content": bool(text), "upstream": upstream})
                n = len(records)
                if turn + 1 < a.turns:
                    if err:
                        text = text or "(lost)"
                    nxt = messages + [{"role": "assistant", "content": text},
                                      {"role": "user", "content": f"And then, in verse {turn + 2}?"}]
                    think = rng.expovariate(1000.0 / a.think_ms) if a.think_ms > 0 else 0.0
                    seq[0] += 1
                    ready.append((time.time() + think, seq[0], c, turn + 1, nxt))
                in_flight[0] -= 1
                cv.notify_all()
            if on_progress:
                on_progress(n)

    threads = [threading.Thread(target=client) for _ in range(a.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return records


def cache_share(records):
    ok = [r for r in records if not r["error"]]
    prompt = sum(r["usage"]["prompt_tokens"] for r in ok)
    cached = sum(r["usage"]["prompt_tokens_details"]["cached_tokens"] for r in ok)
    return cached / max(prompt, 1), cached, prompt


def same_replica_share(records):
    """Of the later turns, the share that went to the replica of the conversation's previous turn: 1 with
    affinity; with round robin it depends on how the clients' requests interleave (clients that move in
    step keep landing on the same replica), and it is what the round-robin cache share follows."""
    where = {(r["user"], r["turn"]): r["upstream"] for r in records if r["upstream"]}
    later = [k for k in where if k[1] > 0 and (k[0], k[1] - 1) in where]
    return sum(where[k] == where[(k[0], k[1] - 1)] for k in later) / max(len(later), 1)


def cmd_replicas(a):
    n_req = a.conversations * a.turns
    print(f"{a.replicas} replicas behind nginx, {a.conversations} conversations x {a.turns} turns "
          f"(~{a.history_words}-word histories, own user each), {a.clients} requests at a time, "
          f"think time {a.think_ms:.0f} ms, streaming, "
          f"{a.max_tokens}-token replies, each replica --parallel {a.parallel} --cache-ram {a.cache_ram}")
    shares, failed = {"affinity": [], "round-robin": []}, 0
    for policy in ["affinity", "round-robin"] * a.repeat:
        reps = Replicas(a, policy)
        t0 = time.time()
        records = run_conversations(a, reps.port)
        dt = time.time() - t0
        stores = reps.store_mib()
        reps.stop()
        errors = [r for r in records if r["error"]]
        failed += len(errors)
        share, cached, prompt = cache_share(records)
        shares[policy].append(share)
        print(f"  {policy:11s}: {len(records)}/{n_req} requests, {len(errors)} errors, {dt:6.1f} s, "
              f"prompt tokens from cache {cached}/{prompt} = {share * 100:5.1f} %, prefix stores "
              + ", ".join(f"{m:.1f}" for m in stores if m is not None) + " MiB, later turns on the previous "
              f"turn's replica {same_replica_share(records) * 100:.0f} %")
        for r in errors[:5]:
            print(f"    error: {r['user']} turn {r['turn']}: {r['error']}")
        for turn in range(a.turns):
            tshare, tcached, tprompt = cache_share([r for r in records if r["turn"] == turn])
            print(f"    turn {turn + 1}: {tcached}/{tprompt} = {tshare * 100:5.1f} %")
    mean = {k: sum(v) / len(v) for k, v in shares.items()}
    ratio = mean["affinity"] / max(mean["round-robin"], 1e-9)
    print(f"  mean cache share over {a.repeat} run(s): affinity {mean['affinity'] * 100:.1f} %, round-robin "
          f"{mean['round-robin'] * 100:.1f} %; ratio {ratio:.2f}x")
    ok = failed == 0 and ratio >= 1.5
    if a.kill:
        reps = Replicas(a, "affinity")
        killed = []

        def progress(n):
            if n == n_req // 3 and not killed:
                killed.append(reps.pids[0])
                os.kill(reps.pids[0], signal.SIGKILL)

        records = run_conversations(a, reps.port, progress)
        reps.stop()
        before = [r for r in records if r["error"] and not r["started"]]
        during = [r for r in records if r["error"] and r["started"]]
        print(f"  kill run (affinity, replica pid {killed[0] if killed else '-'} SIGKILLed after {n_req // 3} "
              f"requests): {len(records)} requests, {len(before)} failed before the response began, {len(during)} "
              f"cut after it began")
        for r in before[:5]:
            print(f"    lost: {r['user']} turn {r['turn']}: {r['error']}")
        for r in during[:5]:
            print(f"    cut: {r['user']} turn {r['turn']} ({'after' if r['content'] else 'before'} its first "
                  f"content chunk): {r['error']}")
        ok = ok and not before and bool(killed)
    print("  PASS" if ok else "  FAIL")
    return 0 if ok else 1


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["spec", "system", "replicas"])
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
    p.add_argument("--text", help="replicas: a text file the conversation histories are cut from")
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument("--parallel", type=int, default=2, help="replicas: --parallel of each replica")
    p.add_argument("--cache-ram", type=int, default=256, help="replicas: each replica's --cache-ram MiB")
    p.add_argument("--conversations", type=int, default=33)
    p.add_argument("--clients", type=int, default=4, help="replicas: requests in flight at a time")
    p.add_argument("--think-ms", type=float, default=200,
                   help="replicas: mean think time between a reply and the user's next turn (0: none)")
    p.add_argument("--history-words", type=int, default=190, help="replicas: ~250 tokens of KJV text")
    p.add_argument("--repeat", type=int, default=1, help="replicas: runs per policy (alternating), averaged")
    p.add_argument("--kill", action="store_true", help="replicas: also a run that kills a replica mid-run")
    a = p.parse_args()
    if a.what == "replicas" and not a.text:
        p.error("replicas needs --text FILE")
    return {"spec": cmd_spec, "system": cmd_system, "replicas": cmd_replicas}[a.what](a)


if __name__ == "__main__":
    sys.exit(main())
