// The gem4 subcommands. Each takes the full argv and the index of its first own argument, and
// returns a process exit code; errors are thrown and reported by main.
#pragma once

namespace gem4::cli {

int cmd_inspect(int argc, char** argv, int first);
int cmd_eval(int argc, char** argv, int first);
int cmd_perplexity(int argc, char** argv, int first);
int cmd_make_model(int argc, char** argv, int first);
int cmd_bench(int argc, char** argv, int first);
int cmd_run(int argc, char** argv, int first);
int cmd_chat(int argc, char** argv, int first);
int cmd_tokenize(int argc, char** argv, int first);
int cmd_template(int argc, char** argv, int first);
int cmd_serve(int argc, char** argv, int first);
int cmd_cache(int argc, char** argv, int first);
int cmd_encode(int argc, char** argv, int first);

}  // namespace gem4::cli
