// thx predict's span filling (eval/predict.h) against T5's published convention, on a tiny T5
// tokenizer of 64 pieces: the 100 sentinels follow the pieces, <extra_id_N> = vocabulary size
// - 1 - N (T5's 32100-id vocabulary: <extra_id_0> = 32099), so here <extra_id_0> = 163. The
// encoder input is each piece of text encoded on its own, each marker as its sentinel, cut to
// inputs_length - 1 and ended by EOS (id 1); the output text writes each sentinel back as its
// marker and ends at EOS or padding.
#include <gtest/gtest.h>

#include "data/data_fixtures.h"
#include "data/tokenizer.h"
#include "eval/predict.h"
#include "test_util.h"

namespace thx::test {
namespace {
namespace THX_FILE_ID {

std::vector<int32_t> cat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

TEST(SpanFilling, InputsFollowT5sSentinelConvention) {
  TempDir dir;
  const Tokenizer tok(tiny_tokenizer(dir));
  ASSERT_EQ(tok.pieces(), 64);
  const int32_t extra0 = 163, extra7 = 156;  // 64 + 100 - 1 - N
  const std::string a = "the model", b = " to each other";
  EXPECT_EQ(span_filling_input(tok, a + "<extra_id_0>" + b + "<extra_id_7>", 128, "x"),
            cat({tok.encode(a), {extra0}, tok.encode(b), {extra7}, {1}}));
  EXPECT_EQ(span_filling_input(tok, "<extra_id_0>", 128, "x"), (std::vector<int32_t>{extra0, 1}));
  EXPECT_EQ(span_filling_input(tok, "", 128, "x"), std::vector<int32_t>{1});
  // Cut to inputs_length - 1, EOS last.
  const auto whole = span_filling_input(tok, a + "<extra_id_0>" + b, 128, "x");
  ASSERT_GT(whole.size(), 5u);
  auto cut = std::vector<int32_t>(whole.begin(), whole.begin() + 4);
  cut.push_back(1);
  EXPECT_EQ(span_filling_input(tok, a + "<extra_id_0>" + b, 5, "x"), cut);
  // Not a marker: text.
  EXPECT_EQ(span_filling_input(tok, "<extra_id_x>", 128, "x"), cat({tok.encode("<extra_id_x>"), {1}}));
  try {
    span_filling_input(tok, "a <extra_id_100>", 128, "in.txt:3");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "in.txt:3: <extra_id_100>: sentinels go from 0 to 99");
  }
}

TEST(SpanFilling, OutputWritesSentinelsBackAndStopsAtEos) {
  TempDir dir;
  const Tokenizer tok(tiny_tokenizer(dir));
  const auto hello = tok.encode("the model"), x = tok.encode("other");
  std::vector<int64_t> ids = {163};
  ids.insert(ids.end(), hello.begin(), hello.end());
  ids.push_back(160);  // <extra_id_3>
  ids.insert(ids.end(), x.begin(), x.end());
  const std::string want = "<extra_id_0>" + tok.decode(hello) + "<extra_id_3>" + tok.decode(x);
  EXPECT_EQ(span_filling_text(tok, ids), want);
  auto with_eos = ids;
  with_eos.insert(with_eos.end(), {1, 163, 5});  // nothing after EOS counts
  EXPECT_EQ(span_filling_text(tok, with_eos), want);
  auto with_pad = ids;
  with_pad.insert(with_pad.end(), {0, 0});
  EXPECT_EQ(span_filling_text(tok, with_pad), want);
  EXPECT_EQ(span_filling_text(tok, {63}), tok.decode(std::vector<int32_t>{63}));  // the last piece is a piece
  EXPECT_EQ(span_filling_text(tok, {64}), "<extra_id_99>");                       // the first sentinel id
  EXPECT_EQ(span_filling_text(tok, {}), "");
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx::test
