// Corpus readers on small fixtures written here, and on ../shared/data when it is present.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>

#include "common/error.h"
#include "data/corpus.h"
#include "test_util.h"

namespace thx {
namespace {
namespace THX_FILE_ID {

std::vector<std::string> read(const std::vector<std::string>& files, CorpusFormat f,
                              CorpusStats* stats_out = nullptr) {
  std::vector<std::string> docs;
  CorpusStats stats;
  read_corpus(files, f, [&](std::string&& d) { docs.push_back(d); }, stats);
  if (stats_out) *stats_out = stats;
  return docs;
}

TEST(Corpus, PlainTextBlankLineSeparated) {
  test::TempDir dir;
  const auto f = dir.write("a.txt", "First doc line one.\nline two.\n\n\n  \nSecond doc.\r\n");
  EXPECT_EQ(read({f}, CorpusFormat::text),
            (std::vector<std::string>{"First doc line one.\nline two.", "Second doc."}));
  EXPECT_EQ(read({f}, CorpusFormat::text_files).size(), 1u);
}

TEST(Corpus, WikiExtractorWithMalformedLines) {
  test::TempDir dir;
  const auto f = dir.write("wiki_00",
                           "<doc id=\"1\" url=\"u\" title=\"A\">\nA\n\nAlpha text.\n</doc>\n"
                           "stray line\n"
                           "<doc id=\"2\" url=\"u\" title=\"B\">\nB\nBad \xff byte line.\nBeta.\n</doc>\n"
                           "<doc id=\"3\" url=\"u\" title=\"C\">\nC\nnever closed\n");
  CorpusStats s;
  const auto docs = read({f}, CorpusFormat::auto_detect, &s);
  EXPECT_EQ(docs, (std::vector<std::string>{"A\nAlpha text.", "B\nBeta."}));
  EXPECT_EQ(s.bad_lines, 3);  // stray line, invalid UTF-8, unterminated doc
  ASSERT_EQ(s.bad_examples.size(), 3u);
  EXPECT_EQ(s.bad_examples[0], f + ":6: text outside <doc> ... </doc>");
  EXPECT_EQ(s.bad_examples[1], f + ":9: not valid UTF-8");
  EXPECT_EQ(s.bad_examples[2], f + ":12: <doc> not closed at end of file");
}

TEST(Corpus, JsonLines) {
  test::TempDir dir;
  const auto f = dir.write("c4.jsonl",
                           "{\"text\": \"one\", \"url\": \"x\"}\n{broken\n{\"no_text\": 1}\n"
                           "{\"text\": 5}\n\n{\"text\": \"two\\nlines\"}\n");
  CorpusStats s;
  EXPECT_EQ(read({f}, CorpusFormat::auto_detect, &s), (std::vector<std::string>{"one", "two\nlines"}));
  EXPECT_EQ(s.bad_lines, 3);
  EXPECT_EQ(s.bad_examples[0], f + ":2: not valid JSON");
}

TEST(Corpus, BooksJoinHardWrappedLines) {
  test::TempDir dir;
  const auto f = dir.write("book.txt", "\nCHAPTER I\n\nIt was a dark\nand stormy night;\n  the rain fell.\n\nEnd.\n");
  EXPECT_EQ(read({f}, CorpusFormat::books),
            (std::vector<std::string>{"CHAPTER I\nIt was a dark and stormy night; the rain fell.\nEnd."}));
}

TEST(Corpus, FilesDirectoriesAndGlobs) {
  test::TempDir dir;
  std::filesystem::create_directories(dir.path / "d" / "sub");
  std::filesystem::create_directories(dir.path / "d" / ".hidden");
  dir.write("d/b.txt", "b\n");
  dir.write("d/sub/a.txt", "a\n");
  dir.write("d/.hidden/x.txt", "x\n");
  dir.write("d/.dotfile", "y\n");
  dir.write("c.txt", "c\n");
  const auto files = expand_inputs({dir.file("d"), dir.file("c*.txt"), dir.file("d/b.txt")});
  EXPECT_EQ(files, (std::vector<std::string>{dir.file("c.txt"), dir.file("d/b.txt"),
                                             dir.file("d/sub/a.txt")}));
  // Each refused input is one line naming it and why.
  const auto refusal = [&](const std::string& input) {
    try {
      expand_inputs({input});
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_EQ(refusal(dir.file("nope*")), dir.file("nope*") + ": no such file, directory or matching file");
  // A folder that exists, with only hidden files in it: not "no such file".
  std::filesystem::create_directories(dir.file("e"));
  dir.write("e/.only", "z\n");
  EXPECT_EQ(refusal(dir.file("e")),
            dir.file("e") + ": a directory with no files in it (those whose names start with '.' are skipped)");
  // A pipe that exists: not "no such file" either.
  ASSERT_EQ(::mkfifo(dir.file("pipe").c_str(), 0644), 0);
  EXPECT_EQ(refusal(dir.file("pipe")),
            dir.file("pipe") + ": not a regular file or a directory (a pipe, socket or device); write the corpus "
                               "to a file");
}

TEST(Corpus, NothingUsableIsFatalWithTheFirstProblem) {
  test::TempDir dir;
  const auto f = dir.write("bad.jsonl", "{oops\n{\"x\":1}\n");
  try {
    read({f}, CorpusFormat::jsonl);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              f + ": no usable document (2 malformed lines); first problem: " + f + ":1: not valid JSON");
  }
}

TEST(Corpus, Utf8Validation) {
  EXPECT_TRUE(valid_utf8("plain ascii"));
  EXPECT_TRUE(valid_utf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
  EXPECT_FALSE(valid_utf8("\xc3"));          // truncated
  EXPECT_FALSE(valid_utf8("\xc0\xaf"));      // overlong
  EXPECT_FALSE(valid_utf8("\xed\xa0\x80"));  // surrogate
  EXPECT_FALSE(valid_utf8("\xf5\x80\x80\x80"));
}

TEST(Corpus, RealWikipediaAndBooks) {
  const std::string wiki = std::string(THX_SOURCE_DIR) + "/../shared/data/pretrain/enwiki/AA/wiki_00";
  const std::string book = std::string(THX_SOURCE_DIR) + "/../shared/data/pretrain/gutenberg/book_000.txt";
  if (!std::filesystem::exists(wiki) || !std::filesystem::exists(book))
    GTEST_SKIP() << "../shared/data/pretrain is absent: real-data reader checks skipped";
  CorpusStats s;
  const auto docs = read({wiki}, CorpusFormat::auto_detect, &s);
  EXPECT_GT(docs.size(), 10u);
  EXPECT_EQ(s.bad_lines, 0);
  EXPECT_EQ(docs[0].substr(0, 9), "Anarchism");  // the title line comes first
  const auto books = read({book}, CorpusFormat::books);
  ASSERT_EQ(books.size(), 1u);
  EXPECT_GT(books[0].size(), 1000u);
  EXPECT_NE(books[0].find("LINCOLN LETTERS\nBy Abraham Lincoln"), std::string::npos);
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx
