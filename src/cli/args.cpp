#include "cli/args.h"

#include <sstream>

namespace gem4::cli {

namespace {
std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep))
    if (!cur.empty()) out.push_back(cur);
  return out;
}
}  // namespace

void Args::value(const std::string& names, const std::string& meta, const std::string& help, const std::string& def) {
  decls_.push_back({split(names, ','), meta, help, def, false});
}

void Args::flag(const std::string& names, const std::string& help) { decls_.push_back({split(names, ','), "", help, "", true}); }

const Args::Decl& Args::decl(const std::string& name) const {
  for (const auto& d : decls_)
    for (const auto& n : d.names)
      if (n == name) return d;
  throw std::logic_error("undeclared flag " + name);
}

bool Args::parse(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") return false;
    if (a.size() > 1 && a[0] == '-' && !(a.size() > 1 && (std::isdigit(static_cast<unsigned char>(a[1])) || a[1] == '.'))) {
      std::string inline_value;
      bool has_inline = false;
      if (auto eq = a.find('='); eq != std::string::npos && a.rfind("--", 0) == 0) {
        inline_value = a.substr(eq + 1);
        a = a.substr(0, eq);
        has_inline = true;
      }
      const Decl* d = nullptr;
      for (const auto& x : decls_)
        for (const auto& n : x.names)
          if (n == a) d = &x;
      if (!d) throw ArgError(command_ + ": unknown flag '" + a + "' (see gem4 " + command_ + " --help)");
      if (d->is_flag) {
        values_[d->names[0]] = "1";
      } else if (has_inline) {
        values_[d->names[0]] = inline_value;
        all_values_[d->names[0]].push_back(inline_value);
      } else {
        if (i + 1 >= argc) throw ArgError(command_ + ": flag '" + a + "' needs a value (" + d->meta + ")");
        values_[d->names[0]] = argv[++i];
        all_values_[d->names[0]].push_back(argv[i]);
      }
    } else {
      positional_.push_back(a);
    }
  }
  return true;
}

std::string Args::help() const {
  std::ostringstream o;
  o << "usage: gem4 " << command_ << " [options]\n" << summary_ << "\n\noptions:\n";
  for (const auto& d : decls_) {
    std::string left = "  ";
    for (size_t i = 0; i < d.names.size(); ++i) left += (i ? ", " : "") + d.names[i];
    if (!d.is_flag) left += " " + d.meta;
    if (left.size() < 30) left.resize(30, ' ');
    else left += "\n" + std::string(30, ' ');
    o << left << d.help;
    if (!d.def.empty()) o << " (default " << d.def << ")";
    o << "\n";
  }
  return o.str();
}

std::vector<std::string> Args::all(const std::string& name) const {
  auto it = all_values_.find(decl(name).names[0]);
  return it == all_values_.end() ? std::vector<std::string>{} : it->second;
}

bool Args::has(const std::string& name) const { return values_.count(decl(name).names[0]) > 0; }

std::string Args::str(const std::string& name) const {
  const Decl& d = decl(name);
  auto it = values_.find(d.names[0]);
  return it == values_.end() ? d.def : it->second;
}

long long Args::integer(const std::string& name) const {
  const std::string s = str(name);
  try {
    size_t used = 0;
    long long v = std::stoll(s, &used);
    if (used != s.size()) throw std::invalid_argument("trailing");
    return v;
  } catch (const std::exception&) {
    throw ArgError(command_ + ": flag '" + name + "' expects an integer, got '" + s + "'");
  }
}

double Args::number(const std::string& name) const {
  const std::string s = str(name);
  try {
    size_t used = 0;
    double v = std::stod(s, &used);
    if (used != s.size()) throw std::invalid_argument("trailing");
    return v;
  } catch (const std::exception&) {
    throw ArgError(command_ + ": flag '" + name + "' expects a number, got '" + s + "'");
  }
}

bool Args::on(const std::string& name) const { return has(name); }

std::vector<std::string> Args::list(const std::string& name) const { return split(str(name), ','); }

}  // namespace gem4::cli
