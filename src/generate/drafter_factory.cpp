#include "generate/drafter_factory.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

#include "generate/drafter_model.h"
#include "generate/drafter_mtp.h"
#include "generate/drafter_ngram.h"

namespace gem4::generate {

CombinedDrafter::CombinedDrafter(std::vector<std::unique_ptr<Drafter>> drafters)
    : drafters_(std::move(drafters)) {
  if (drafters_.empty()) throw std::invalid_argument("CombinedDrafter: no drafters");
}

bool CombinedDrafter::needs_hidden() const {
  for (const auto& d : drafters_)
    if (d->needs_hidden()) return true;
  return false;
}

void CombinedDrafter::draft(const DraftRequest& req, Draft& out) {
  for (const auto& d : drafters_) {
    out.clear();
    d->draft(req, out);
    if (!out.tokens.empty()) return;
  }
}

void CombinedDrafter::reset() {
  for (const auto& d : drafters_) d->reset();
}

std::vector<std::string> parse_spec(const std::string& spec) {
  std::vector<std::string> kinds;
  std::string cur;
  auto flush = [&]() {
    std::string k;
    for (char c : cur)
      if (!std::isspace(static_cast<unsigned char>(c)))
        k += char(std::tolower(static_cast<unsigned char>(c)));
    cur.clear();
    if (k.empty()) return;
    if (k != "none" && k != "mtp" && k != "draft" && k != "ngram")
      throw std::invalid_argument("--spec: '" + k + "' is not one of none, mtp, draft, ngram");
    if (std::find(kinds.begin(), kinds.end(), k) != kinds.end())
      throw std::invalid_argument("--spec: '" + k + "' given twice in '" + spec + "'");
    kinds.push_back(k);
  };
  for (char c : spec) {
    if (c == ',' || c == '+') {
      flush();
    } else {
      cur += c;
    }
  }
  flush();
  if (std::find(kinds.begin(), kinds.end(), "none") != kinds.end()) {
    if (kinds.size() > 1)
      throw std::invalid_argument("--spec: 'none' cannot be combined with other kinds ('" + spec + "')");
    kinds.clear();
  }
  return kinds;
}

std::unique_ptr<Drafter> make_drafter(const std::string& spec, const Model& target,
                                      const std::vector<const Model*>& draft_models, ThreadPool* pool,
                                      const SessionOptions& draft_session_opt) {
  const std::vector<std::string> kinds = parse_spec(spec);
  if (kinds.empty()) return nullptr;
  const Model* assistant = nullptr;
  const Model* small = nullptr;
  for (const Model* m : draft_models) {
    if (!m) continue;
    if (m->config.arch == "gemma4-assistant" && !assistant) assistant = m;
    if (m->config.arch == "gemma4" && !small) small = m;
  }
  const bool ngram = std::find(kinds.begin(), kinds.end(), "ngram") != kinds.end();
  std::vector<std::unique_ptr<Drafter>> models;
  for (const std::string& k : kinds) {
    if (k == "mtp") {
      if (!assistant)
        throw std::invalid_argument("--spec mtp needs -md FILE with a gemma4-assistant (MTP) model");
      auto mtp = std::make_unique<MtpDrafter>(*assistant, target, pool);
      mtp->assistant().exact_gelu = draft_session_opt.switches.exact_gelu;
      models.push_back(std::move(mtp));
    } else if (k == "draft") {
      if (!small) throw std::invalid_argument("--spec draft needs -md FILE with a smaller gemma4 model");
      models.push_back(std::make_unique<ModelDrafter>(*small, target, pool, draft_session_opt));
    }
  }
  std::vector<std::unique_ptr<Drafter>> all;
  if (ngram) all.push_back(std::make_unique<NgramDrafter>(models.empty() ? 1 : 3, 3));
  for (auto& m : models) all.push_back(std::move(m));
  if (all.size() == 1) return std::move(all.front());
  return std::make_unique<CombinedDrafter>(std::move(all));
}

}  // namespace gem4::generate
