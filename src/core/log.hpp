// scurry: messages to the user on stderr. Quiet mode silences info and progress, never errors.
#pragma once
#include <string>

namespace scurry::log {

void set_quiet(bool q);
bool quiet();
void info(const std::string& msg);  // "scurry: msg" unless quiet
void warn(const std::string& msg);  // "scurry: warning: msg", always

}  // namespace scurry::log
