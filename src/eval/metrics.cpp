#include "eval/metrics.h"

#include <algorithm>
#include <clocale>
#include <cmath>
#include <cwctype>
#include <locale.h>
#include <numeric>
#include <set>

#include <fmt/format.h>
#include <unicode/locid.h>
#include <unicode/unistr.h>

#include "common/error.h"

namespace thx {

double accuracy(const std::vector<int>& pred, const std::vector<int>& gold) {
  THX_CHECK(pred.size() == gold.size(), "accuracy: {} predictions for {} golds", pred.size(), gold.size());
  if (gold.empty()) return 0;
  int64_t right = 0;
  for (size_t i = 0; i < gold.size(); ++i) right += pred[i] == gold[i];
  return double(right) / double(gold.size());
}

double binary_f1(const std::vector<int>& pred, const std::vector<int>& gold) {
  THX_CHECK(pred.size() == gold.size(), "f1: {} predictions for {} golds", pred.size(), gold.size());
  int64_t tp = 0, fp = 0, fn = 0;
  for (size_t i = 0; i < gold.size(); ++i) {
    tp += pred[i] == 1 && gold[i] == 1;
    fp += pred[i] == 1 && gold[i] != 1;
    fn += pred[i] != 1 && gold[i] == 1;
  }
  return tp == 0 ? 0.0 : 2.0 * double(tp) / double(2 * tp + fp + fn);
}

double matthews_corrcoef(const std::vector<int>& pred, const std::vector<int>& gold) {
  THX_CHECK(pred.size() == gold.size(), "mcc: {} predictions for {} golds", pred.size(), gold.size());
  // K-class form: (c·s − Σ p_k t_k) / sqrt((s² − Σ p_k²)(s² − Σ t_k²)), with c correct, s
  // samples, p_k predicted and t_k true counts of class k.
  std::map<int, double> p, t;
  double c = 0, s = double(gold.size());
  for (size_t i = 0; i < gold.size(); ++i) p[pred[i]] += 1, t[gold[i]] += 1, c += pred[i] == gold[i];
  double pt = 0, pp = 0, tt = 0;
  for (const auto& [k, v] : p) pp += v * v, pt += v * (t.count(k) ? t[k] : 0.0);
  for (const auto& [k, v] : t) tt += v * v;
  const double den = std::sqrt((s * s - pp) * (s * s - tt));
  return den == 0 ? 0.0 : (c * s - pt) / den;
}

double pearson(const std::vector<double>& x, const std::vector<double>& y) {
  THX_CHECK(x.size() == y.size() && x.size() >= 2, "pearson: needs two equal-length series of 2+ values");
  const double n = double(x.size());
  const double mx = std::accumulate(x.begin(), x.end(), 0.0) / n, my = std::accumulate(y.begin(), y.end(), 0.0) / n;
  double sxy = 0, sxx = 0, syy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sxy += (x[i] - mx) * (y[i] - my), sxx += (x[i] - mx) * (x[i] - mx), syy += (y[i] - my) * (y[i] - my);
  }
  return sxx == 0 || syy == 0 ? 0.0 : sxy / std::sqrt(sxx * syy);
}

std::vector<double> average_ranks(const std::vector<double>& x) {
  std::vector<size_t> order(x.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return x[a] < x[b]; });
  std::vector<double> r(x.size());
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j + 1 < order.size() && x[order[j + 1]] == x[order[i]]) ++j;
    const double rank = 0.5 * double(i + j) + 1.0;  // mean of ranks i+1 .. j+1
    for (size_t k = i; k <= j; ++k) r[order[k]] = rank;
    i = j + 1;
  }
  return r;
}

double spearman(const std::vector<double>& x, const std::vector<double>& y) {
  return pearson(average_ranks(x), average_ranks(y));
}

double macro_f1(const std::vector<int>& pred, const std::vector<int>& gold, int classes) {
  THX_CHECK(pred.size() == gold.size(), "macro-F1: {} predictions for {} golds", pred.size(), gold.size());
  double sum = 0;
  for (int k = 0; k < classes; ++k) {
    int64_t tp = 0, fp = 0, fn = 0;
    for (size_t i = 0; i < gold.size(); ++i) {
      tp += pred[i] == k && gold[i] == k;
      fp += pred[i] == k && gold[i] != k;
      fn += pred[i] != k && gold[i] == k;
    }
    sum += tp == 0 ? 0.0 : 2.0 * double(tp) / double(2 * tp + fp + fn);
  }
  return classes > 0 ? sum / classes : 0.0;
}

MultiRcScore multirc_score(const std::vector<int>& pred, const std::vector<int>& gold,
                           const std::vector<std::string>& group) {
  THX_CHECK(pred.size() == gold.size() && gold.size() == group.size(), "multirc: sizes differ");
  MultiRcScore s;
  s.f1a = binary_f1(pred, gold);
  std::map<std::string, bool> all_right;
  for (size_t i = 0; i < gold.size(); ++i) {
    auto it = all_right.emplace(group[i], true).first;
    it->second = it->second && pred[i] == gold[i];
  }
  int64_t right = 0;
  for (const auto& [g, ok] : all_right) right += ok;
  s.exact_match = all_right.empty() ? 0.0 : double(right) / double(all_right.size());
  return s;
}

// ---- SQuAD -----------------------------------------------------------------------------------

namespace {

// UTF-8 <-> code points; an invalid byte stands for itself (U+0080..U+00FF), as a Latin-1 read.
std::u32string decode(const std::string& s) {
  std::u32string out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = s[i];
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) {
      out.push_back(c), ++i;
      continue;
    }
    char32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    bool ok = true;
    for (int k = 1; k < n; ++k) {
      const unsigned char d = s[i + k];
      ok = ok && (d >> 6) == 2;
      cp = (cp << 6) | (d & 0x3F);
    }
    if (!ok) {
      out.push_back(c), ++i;
      continue;
    }
    out.push_back(cp), i += n;
  }
  return out;
}

std::string encode(const std::u32string& s) {
  std::string out;
  for (char32_t c : s) {
    if (c < 0x80) {
      out += char(c);
    } else if (c < 0x800) {
      out += char(0xC0 | (c >> 6)), out += char(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
      out += char(0xE0 | (c >> 12)), out += char(0x80 | ((c >> 6) & 0x3F)), out += char(0x80 | (c & 0x3F));
    } else {
      out += char(0xF0 | (c >> 18)), out += char(0x80 | ((c >> 12) & 0x3F));
      out += char(0x80 | ((c >> 6) & 0x3F)), out += char(0x80 | (c & 0x3F));
    }
  }
  return out;
}

// Python's str methods need Unicode character classes: C.UTF-8's wide-character tables.
locale_t utf8_locale() {
  static locale_t l = [] {
    locale_t x = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
    return x ? x : newlocale(LC_CTYPE_MASK, "C", (locale_t)0);
  }();
  return l;
}
// Python's str.split() whitespace (str.isspace), which glibc's iswspace does not match (it
// leaves out U+00A0 and U+202F, for one).
bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}
bool is_word(char32_t c) {  // Python re's \w for str patterns: alphanumeric or underscore
  return c == U'_' || (c < 0x80 ? std::isalnum(int(c)) != 0 : iswalnum_l(wint_t(c), utf8_locale()) != 0);
}
bool is_ascii_punct(char32_t c) { return c < 0x80 && std::ispunct(int(c)); }  // string.punctuation

std::vector<std::string> tokens(const std::string& normalized) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : normalized) {
    if (c == ' ') {
      if (!cur.empty()) out.push_back(cur), cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

double token_f1(const std::vector<std::string>& g, const std::vector<std::string>& p) {
  std::map<std::string, int64_t> gc;
  for (const auto& t : g) ++gc[t];
  int64_t same = 0;
  for (const auto& t : p) {
    auto it = gc.find(t);
    if (it != gc.end() && it->second > 0) --it->second, ++same;
  }
  if (same == 0) return 0;
  const double precision = double(same) / double(p.size()), recall = double(same) / double(g.size());
  return 2 * precision * recall / (precision + recall);
}

}  // namespace

std::string normalize_answer(const std::string& s) {
  // lower -> remove punctuation -> remove articles -> fix whitespace, in the scripts' order.
  // Python's str.lower() is Unicode's full case mapping with the final-sigma rule ("ΑΣ" ->
  // "ας", "İ" -> "i̇", two code points): ICU's toLower in the root locale does the same.
  std::string lowered;
  icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), int32_t(s.size())))
      .toLower(icu::Locale::getRoot())
      .toUTF8String(lowered);
  std::u32string u = decode(lowered), v;
  for (char32_t c : u)
    if (!is_ascii_punct(c)) v.push_back(c);
  // re.sub(r'\b(a|an|the)\b', ' ', text): a whole word a/an/the becomes one space.
  std::u32string w;
  for (size_t i = 0; i < v.size();) {
    bool matched = false;
    if (i == 0 || !is_word(v[i - 1])) {
      for (const std::u32string art : {U"the", U"an", U"a"}) {
        const size_t e = i + art.size();
        if (v.compare(i, art.size(), art) == 0 && (e == v.size() || !is_word(v[e]))) {
          w.push_back(U' '), i = e, matched = true;
          break;
        }
      }
    }
    if (!matched) w.push_back(v[i++]);
  }
  // ' '.join(text.split())
  std::u32string out;
  bool pending = false;
  for (char32_t c : w) {
    if (is_space(c)) {
      pending = !out.empty();
    } else {
      if (pending) out.push_back(U' ');
      out.push_back(c), pending = false;
    }
  }
  return encode(out);
}

double squad_exact(const std::string& gold, const std::string& pred) {
  return normalize_answer(gold) == normalize_answer(pred) ? 1.0 : 0.0;
}

double squad_f1_v1(const std::string& gold, const std::string& pred) {
  return token_f1(tokens(normalize_answer(gold)), tokens(normalize_answer(pred)));
}

double squad_f1_v2(const std::string& gold, const std::string& pred) {
  const auto g = tokens(normalize_answer(gold)), p = tokens(normalize_answer(pred));
  if (g.empty() || p.empty()) return g == p ? 1.0 : 0.0;
  return token_f1(g, p);
}

std::pair<double, double> record_em_f1(const std::vector<std::string>& golds, const std::string& pred) {
  double em = 0, f1 = 0;
  for (const auto& g : golds) em = std::max(em, squad_exact(g, pred)), f1 = std::max(f1, squad_f1_v1(g, pred));
  return {em, f1};
}

std::pair<double, double> best_no_answer_threshold(const std::vector<SquadQuestion>& questions,
                                                   const std::map<std::string, std::string>& predictions,
                                                   const std::map<std::string, double>& scores,
                                                   const std::map<std::string, double>& na_probs,
                                                   const std::vector<std::string>* na_order) {
  THX_CHECK(!na_order || na_order->size() == na_probs.size(), "no-answer probabilities: {} ids in order for {}",
            na_order ? na_order->size() : 0, na_probs.size());
  std::map<std::string, bool> has_ans;
  double cur = 0;
  for (const auto& q : questions) has_ans[q.id] = q.has_answer, cur += !q.has_answer;
  double best = cur, thresh = 0;
  std::vector<std::pair<double, std::string>> order;
  if (na_order)
    for (const auto& id : *na_order) order.emplace_back(na_probs.at(id), id);
  else
    for (const auto& [id, p] : na_probs) order.emplace_back(p, id);
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [p, id] : order) {
    auto s = scores.find(id);
    if (s == scores.end()) continue;
    double diff;
    if (has_ans[id]) {
      diff = s->second;
    } else {
      auto pr = predictions.find(id);
      diff = pr != predictions.end() && !pr->second.empty() ? -1.0 : 0.0;
    }
    cur += diff;
    if (cur > best) best = cur, thresh = p;
  }
  return {scores.empty() ? 0.0 : 100.0 * best / double(scores.size()), thresh};
}

SquadScore score_squad(const std::vector<SquadQuestion>& questions,
                       const std::map<std::string, std::string>& predictions, const std::string& version,
                       const std::map<std::string, double>* na_probs, const std::vector<std::string>* na_order) {
  THX_CHECK(version == "1.1" || version == "2.0", "SQuAD version '{}'; allowed: 1.1, 2.0", version);
  const bool v2 = version == "2.0";
  SquadScore s;
  std::map<std::string, double> exact, f1;
  double has_e = 0, has_f = 0, no_e = 0, no_f = 0;
  for (const auto& q : questions) {
    ++s.total;
    auto it = predictions.find(q.id);
    if (it == predictions.end()) ++s.missing;
    const std::string pred = it == predictions.end() ? std::string() : it->second;
    std::vector<std::string> golds;
    for (const auto& a : q.answers)
      if (!v2 || !normalize_answer(a).empty()) golds.push_back(a);
    if (v2 && golds.empty()) golds = {""};  // unanswerable: the right answer is empty
    double e = 0, f = 0;
    if (it != predictions.end())
      for (const auto& g : golds)
        e = std::max(e, squad_exact(g, pred)), f = std::max(f, v2 ? squad_f1_v2(g, pred) : squad_f1_v1(g, pred));
    exact[q.id] = e, f1[q.id] = f;
    s.exact += e, s.f1 += f;
    if (v2) {
      if (q.has_answer) ++s.has_ans_total, has_e += e, has_f += f;
      else ++s.no_ans_total, no_e += e, no_f += f;
    }
  }
  const double n = std::max<int64_t>(s.total, 1);
  s.exact = 100.0 * s.exact / n, s.f1 = 100.0 * s.f1 / n;
  if (v2) {
    if (s.has_ans_total) s.has_ans_exact = 100.0 * has_e / s.has_ans_total, s.has_ans_f1 = 100.0 * has_f / s.has_ans_total;
    if (s.no_ans_total) s.no_ans_exact = 100.0 * no_e / s.no_ans_total, s.no_ans_f1 = 100.0 * no_f / s.no_ans_total;
    if (na_probs) {
      std::tie(s.best_exact, s.best_exact_thresh) =
          best_no_answer_threshold(questions, predictions, exact, *na_probs, na_order);
      std::tie(s.best_f1, s.best_f1_thresh) = best_no_answer_threshold(questions, predictions, f1, *na_probs, na_order);
    }
  }
  return s;
}

BenchmarkAverage benchmark_average(const std::map<std::string, std::map<std::string, double>>& scores) {
  BenchmarkAverage a;
  for (const auto& [task, metrics] : scores) {
    if (metrics.empty()) continue;
    double m = 0;
    for (const auto& [k, v] : metrics) m += v;
    a.value += m / double(metrics.size());
    a.tasks.push_back(task);
  }
  if (!a.tasks.empty()) a.value /= double(a.tasks.size());
  return a;
}

}  // namespace thx
