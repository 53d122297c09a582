// Command-line flags: each flag is declared once (name, aliases, help, default) and that declaration
// drives parsing, validation and the help text. Errors name the flag.
#pragma once
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace gem4::cli {

class ArgError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Args {
 public:
  Args(std::string command, std::string summary) : command_(std::move(command)), summary_(std::move(summary)) {}

  // A flag with a value ("-m FILE"); `names` is a comma list of spellings, e.g. "-m,--model".
  void value(const std::string& names, const std::string& meta, const std::string& help, const std::string& def = "");
  // A boolean switch ("--all-logits").
  void flag(const std::string& names, const std::string& help);

  // Parses argv[first..]; throws ArgError for unknown flags or missing values. Returns false if --help.
  bool parse(int argc, char** argv, int first);
  std::string help() const;

  bool has(const std::string& name) const;  // given on the command line
  std::string str(const std::string& name) const;
  long long integer(const std::string& name) const;  // throws ArgError naming the flag
  double number(const std::string& name) const;
  bool on(const std::string& name) const;
  std::vector<std::string> list(const std::string& name) const;  // comma-separated
  std::vector<std::string> all(const std::string& name) const;   // every value given (a repeatable flag)
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  struct Decl {
    std::vector<std::string> names;
    std::string meta, help, def;
    bool is_flag = false;
  };
  const Decl& decl(const std::string& name) const;
  std::string command_, summary_;
  std::vector<Decl> decls_;
  std::map<std::string, std::string> values_;  // keyed by the first name
  std::map<std::string, std::vector<std::string>> all_values_;  // every occurrence, in order
  std::vector<std::string> positional_;
};

}  // namespace gem4::cli
