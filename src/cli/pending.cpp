// Subcommands whose issues are still open. Each says plainly that it is not implemented yet.
#include <stdexcept>

#include "cli/commands.h"

namespace gem4::cli {

int cmd_run(int, char**, int) { throw std::runtime_error("run: not implemented yet"); }
int cmd_chat(int, char**, int) { throw std::runtime_error("chat: not implemented yet"); }
int cmd_tokenize(int, char**, int) { throw std::runtime_error("tokenize: not implemented yet"); }
int cmd_template(int, char**, int) { throw std::runtime_error("template: not implemented yet"); }
int cmd_serve(int, char**, int) { throw std::runtime_error("serve: not implemented yet"); }

}  // namespace gem4::cli
