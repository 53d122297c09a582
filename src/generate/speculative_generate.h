// generate() (generate/generate.h) with speculative decoding: the same request, callbacks, stop
// rules (end-of-generation ids, stop strings, max_tokens, a full context, cancellation) and stats,
// with the tokens coming from a SpeculativeDecoder. A round emits several tokens; each is handled
// in order exactly as generate() handles one, so the text, the tokens and the stop reason are those
// generate() gives for the same tokens (greedy: the same tokens; sampling: the same distribution).
//
// One difference: afterwards the session holds only the prompt (SpeculativeDecoder::release), not
// the prompt plus the generated tokens, so a following set_tokens recomputes the reply's tokens.
#pragma once
#include "generate/generate.h"
#include "generate/speculative.h"

namespace gem4::generate {

// drafter == nullptr runs the plain loop through the decoder (one token per round).
// spec_stats, when given, receives the decoder's statistics.
GenerateResult generate_speculative(Session& session, const text::Tokenizer& tokenizer, const GenerateRequest& req,
                                    Drafter* drafter, const SpecOptions& opt, const OnPiece& on_piece = {},
                                    SpecStats* spec_stats = nullptr);

}  // namespace gem4::generate
