// scurry: messages to the user on stderr. Quiet mode silences info and progress, never errors.
#pragma once
#include <string>
#include <vector>

namespace scurry::log {

void set_quiet(bool q);
bool quiet();
void info(const std::string& msg);  // "scurry: msg" unless quiet
void warn(const std::string& msg);  // "scurry: warning: msg", always
// Every warning of this process so far, in order (the first 1000; the run report lists them).
std::vector<std::string> warnings_so_far();

}  // namespace scurry::log
