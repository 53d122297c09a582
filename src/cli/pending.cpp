// Subcommands whose issues are still open. Each says plainly that it is not implemented yet.
#include <stdexcept>

#include "cli/commands.h"

namespace gem4::cli {


}  // namespace gem4::cli
