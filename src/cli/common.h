// Flags and helpers shared by several subcommands.
#pragma once
#include <memory>
#include <string>

#include "cli/args.h"
#include "model/batch.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace gem4::cli {

// --no-prune, --no-mask-crop, --no-ple-crop, --simple-cut
void declare_plan_flags(Args& a);
PlanSwitches plan_switches(const Args& a);
// -t/--threads (default: all cores)
void declare_thread_flag(Args& a);
int thread_count(const Args& a);
// --pack-cache DIR|off: where packed weights are kept between runs (model/packed_cache.h);
// --pack-in-memory: read them from there into memory instead of mapping them
void declare_load_flags(Args& a);
LoadOptions load_options(const Args& a);

// Peak resident set size of this process, in bytes (from /proc/self/status VmHWM).
long long peak_rss_bytes();
long long current_rss_bytes();
std::string human_bytes(double bytes);
// Seconds since this process was started by the kernel (from /proc/self/stat; 10 ms resolution), so
// that "time to first token" can include exec, loading and packing the model. -1 if unknown.
double seconds_since_process_start();

}  // namespace gem4::cli
