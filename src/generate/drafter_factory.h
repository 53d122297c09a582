// The drafters a --spec value names, built for a target model (generate/drafter*.h for each kind).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "generate/drafter.h"
#include "generate/session.h"
#include "model/model.h"

namespace gem4 {
class ThreadPool;
}

namespace gem4::generate {

// Tries its drafters in order and uses the first non-empty draft. The n-gram drafter placed first
// with min_n = 3 gives "n-gram when it has a long match, else the model drafter".
class CombinedDrafter : public Drafter {
 public:
  explicit CombinedDrafter(std::vector<std::unique_ptr<Drafter>> drafters);
  const char* name() const override { return "combined"; }
  bool needs_hidden() const override;
  void draft(const DraftRequest& req, Draft& out) override;
  void reset() override;
  const std::vector<std::unique_ptr<Drafter>>& drafters() const { return drafters_; }

 private:
  std::vector<std::unique_ptr<Drafter>> drafters_;
};

// The kinds named by a --spec value: "none", "mtp", "draft", "ngram", or a combination joined by
// ',' or '+' ("mtp,ngram"). Throws std::invalid_argument naming an unknown kind.
std::vector<std::string> parse_spec(const std::string& spec);

// Builds the drafter for a --spec value (nullptr for "none": plain decoding). `draft_models` are the
// -md files, matched by architecture: a gemma4-assistant serves "mtp", a gemma4 serves "draft".
// With "ngram" and a model drafter together, n-gram drafts are used when the match is >= 3 tokens.
// The returned drafter references the models and pool; they must outlive it.
std::unique_ptr<Drafter> make_drafter(const std::string& spec, const Model& target,
                                      const std::vector<const Model*>& draft_models, ThreadPool* pool,
                                      const SessionOptions& draft_session_opt);

}  // namespace gem4::generate
