// score_files.h: `thx score squad`: a predictions file scored against a SQuAD dev file with
// the official v1.1 / v2.0 rules (metrics.h), as the official scripts print or as JSON.
#pragma once
#include <string>

namespace thx {

struct ScoreReport {
  std::string out;       // the scores (text or JSON)
  std::string warnings;  // missing predictions, ids that are not questions
};

// data: the SQuAD dev JSON (its version decides v1.1 or v2.0); predictions: {id: answer};
// na_probs ("" for none): {id: no-answer probability}, for v2.0's best threshold.
ScoreReport score_squad_files(const std::string& data, const std::string& predictions, const std::string& na_probs,
                              bool as_json);

}  // namespace thx
