// h5.h (atomic writes, typed round trips, clear errors on damaged files), csv.h, text_table.h.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/csv.h"
#include "common/error.h"
#include "common/fs.h"
#include "common/h5.h"
#include "common/text_table.h"
#include "test_util.h"

namespace thx {
namespace {
namespace THX_FILE_ID {

// Also defined, with another value, in unity_names_test.cpp, which compiles in this file's
// unity batch: the build itself proves that file-scope names no longer meet.
const char* file_tag() { return "files_test"; }

TEST(UnityBuild, AHelperNamedAsInAnotherFileIsThisFilesOwn) { EXPECT_STREQ(file_tag(), "files_test"); }

TEST(H5, RoundTripsEveryDtypeAndAttributes) {
  test::TempDir dir;
  const std::string path = dir.file("t.h5");
  std::map<std::string, torch::Tensor> want = {
      {"/a/f32", torch::randn({3, 4})},
      {"/a/f64", torch::randn({2}, torch::kFloat64)},
      {"/b/c/i32", torch::arange(6, torch::kInt32).view({2, 3})},
      {"/i64", torch::tensor({int64_t{1} << 40})},
      {"/u8", torch::tensor({0, 1, 255}).to(torch::kUInt8)},
      {"/scalar", torch::tensor(2.5f)},
      {"/empty", torch::empty({0, 3})},
      {"/gz", torch::arange(10000, torch::kInt32)},
  };
  {
    H5Writer w(path);
    for (const auto& [k, v] : want) w.write(k, v, k == "/gz" ? 4 : 0);
    w.write("/strided", torch::arange(12.0).view({3, 4}).t());
    w.attr("/", "config", "attention:\n  h: 24\n");
    w.commit();
  }
  H5Reader r(path);
  for (const auto& [k, v] : want) {
    torch::Tensor got = r.read(k);
    EXPECT_EQ(got.scalar_type(), v.scalar_type()) << k;
    EXPECT_TRUE(torch::equal(got, v)) << k;
  }
  EXPECT_TRUE(torch::equal(r.read("/strided"), torch::arange(12.0).view({3, 4}).t()));
  EXPECT_EQ(r.attr("/", "config"), "attention:\n  h: 24\n");
  EXPECT_TRUE(r.has("/b/c/i32"));
  EXPECT_FALSE(r.has("/b/x/i32"));
  EXPECT_EQ(r.datasets("/a"), (std::vector<std::string>{"/a/f32", "/a/f64"}));
  EXPECT_THROW(r.read("/nope"), InputError);
}

TEST(H5, UncommittedWriteLeavesNothingAndKeepsTheOldFile) {
  test::TempDir dir;
  const std::string path = dir.file("keep.h5");
  {
    H5Writer w(path);
    w.write("/x", torch::ones({2}));
    w.commit();
  }
  {
    H5Writer w(path);  // abandoned: e.g. an exception between open and commit
    w.write("/x", torch::zeros({2}));
  }
  H5Reader r(path);
  EXPECT_TRUE(torch::equal(r.read("/x"), torch::ones({2})));
  int files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir.path)) files += e.is_regular_file();
  EXPECT_EQ(files, 1) << "a temporary file was left behind";
}

TEST(H5, TruncatedOrForeignFilesGiveOneClearError) {
  test::TempDir dir;
  const std::string good = dir.file("good.h5");
  {
    H5Writer w(good);
    w.write("/x", torch::randn({1000}));
    w.commit();
  }
  const auto size = std::filesystem::file_size(good);
  std::filesystem::copy_file(good, dir.file("cut.h5"));
  std::filesystem::resize_file(dir.file("cut.h5"), size / 2);
  for (const std::string& bad : {dir.file("cut.h5"), dir.write("text.h5", "not hdf5"),
                                 dir.file("absent.h5")}) {
    try {
      H5Reader r(bad);
      r.read("/x");
      FAIL() << bad << ": no error";
    } catch (const InputError& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind(bad + ": ", 0), 0u) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  }
}

// Damage HDF5 itself accepts: a file (here without thx's checksum block, as files written
// before it existed) that declares more than it holds, or whose groups link into a loop. Found by
// fuzzing (tests/fuzz/corpus/checkpoint); written here with HDF5's own C API.
TEST(H5, DeclaredSizesBeyondTheFileDamagedTypesAndGroupLoopsAreOneLine) {
  test::TempDir dir;
  const std::string path = dir.file("legacy.h5");
  {
    const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    auto dataset = [&](const char* name, hsize_t n, bool fill, hid_t type = H5T_NATIVE_FLOAT) {
      const hid_t space = H5Screate_simple(1, &n, nullptr);
      const hid_t d = H5Dcreate2(f, name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
      if (fill) {  // random bytes in the file's own type: nothing to convert, nothing to compress
        const torch::Tensor x = torch::randint(256, {int64_t(n * H5Tget_size(type))}, torch::kUInt8);
        EXPECT_GE(H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, x.data_ptr()), 0) << name;
      }
      H5Dclose(d), H5Sclose(space);
    };
    dataset("/full", 1u << 20, true);
    dataset("/hollow", 200000000, false);        // 800 MB declared, nothing stored
    dataset("/huge", hsize_t(1) << 40, false);   // 4 TB declared: more than the file can hold
    const hid_t wide = H5Tcopy(H5T_NATIVE_FLOAT);
    H5Tset_size(wide, 1u << 20);                  // a float of 1 MB per element, stored
    dataset("/wide", 2, true, wide);
    H5Tclose(wide);
    dataset("/big_endian", 8, true, H5T_IEEE_F32BE);
    {  // chunked, unfiltered, one of its 4 chunks written (fuzzing, shard: HDF5 read past a buffer)
      const hsize_t n = 64, chunk = 16, start = 0;
      const hid_t space = H5Screate_simple(1, &n, nullptr), dcpl = H5Pcreate(H5P_DATASET_CREATE);
      H5Pset_chunk(dcpl, 1, &chunk);
      const hid_t d = H5Dcreate2(f, "/partial", H5T_NATIVE_FLOAT, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
      const hid_t mem = H5Screate_simple(1, &chunk, nullptr);
      H5Sselect_hyperslab(space, H5S_SELECT_SET, &start, nullptr, &chunk, nullptr);
      const torch::Tensor x = torch::ones({16});
      EXPECT_GE(H5Dwrite(d, H5T_NATIVE_FLOAT, mem, space, H5P_DEFAULT, x.data_ptr()), 0);
      H5Sclose(mem), H5Dclose(d), H5Pclose(dcpl), H5Sclose(space);
    }
    const hid_t g = H5Gcreate2(f, "/g", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Gclose(g);
    H5Lcreate_hard(f, "/g", f, "/g/loop", H5P_DEFAULT, H5P_DEFAULT);  // /g/loop/loop/... is /g
    H5Fclose(f);
  }
  H5Reader r(path);
  EXPECT_EQ(r.read("/full").numel(), 1 << 20);
  const std::string hollow = test::error_of([&] { r.read("/hollow"); });
  EXPECT_EQ(hollow, path + ": dataset /hollow stores 0 bytes for 800000000 declared (truncated or corrupt?)");
  const std::string huge = test::error_of([&] { r.read("/huge"); });
  EXPECT_EQ(huge, path + ": dataset /huge declares a shape of 1099511627776 elements, more than the file can hold "
                         "(truncated or corrupt?)");
  EXPECT_EQ(test::error_of([&] { r.read("/partial"); }),
            path + ": dataset /partial stores 64 bytes for 256 declared (truncated or corrupt?)");
  const std::string wide = test::error_of([&] { r.read("/wide"); });
  EXPECT_EQ(wide, path + ": dataset /wide has an unsupported type (a float of 1048576 bytes); thx reads "
                         "little-endian IEEE float32/float64, int32/int64 and uint8");
  const std::string big_endian = test::error_of([&] { r.read("/big_endian"); });
  EXPECT_EQ(big_endian, path + ": dataset /big_endian has an unsupported type (a float of 4 bytes); thx reads "
                               "little-endian IEEE float32/float64, int32/int64 and uint8");
  EXPECT_EQ(r.datasets("/"), (std::vector<std::string>{"/big_endian", "/full", "/hollow", "/huge", "/partial", "/wide"}));
}

// A compact dataset (stored in its header) whose dataspace was changed to declare 4 times its
// elements: stored whole and unfiltered, it must hold exactly what it declares.
TEST(H5, ACompactDatasetDeclaringMoreThanItStoresIsOneLine) {
  test::TempDir dir;
  const std::string path = dir.file("compact.h5");
  const hsize_t n = 0x1357;  // a byte pattern found only in the dataspace (size and maximum)
  {
    const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    const hid_t space = H5Screate_simple(1, &n, nullptr), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_layout(dcpl, H5D_COMPACT);
    const hid_t d = H5Dcreate2(f, "/x", H5T_NATIVE_FLOAT, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    const torch::Tensor x = torch::arange(int64_t(n), torch::kFloat32);
    H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x.data_ptr());
    H5Dclose(d), H5Pclose(dcpl), H5Sclose(space), H5Fclose(f);
  }
  EXPECT_EQ(H5Reader(path).read("/x").numel(), int64_t(n));  // the intact file reads
  std::string bytes = read_file(path);
  const std::string from(reinterpret_cast<const char*>(&n), 8);
  const uint64_t four = 4 * n;
  const std::string to(reinterpret_cast<const char*>(&four), 8);
  int patched = 0;
  for (size_t at = bytes.find(from); at != std::string::npos; at = bytes.find(from, at + 8), ++patched)
    bytes.replace(at, 8, to);
  ASSERT_EQ(patched, 2);
  write_file_atomic(path, bytes);
  const std::string e = test::error_of([&] { H5Reader(path).read("/x"); });
  EXPECT_EQ(e, path + ": dataset /x stores 19804 bytes for 79216 declared (truncated or corrupt?)");
}

// A damaged shard without the checksum block on which HDF5 1.10 divides by zero opening a
// dataset (fuzzing, shard): read first in a child process, it is one line here; and a sound
// legacy file still reads (the child comes back cleanly).
// In the second file the crashing dataset is one the listing does not reach: the child reads
// every dataset it lists without crashing, and from then on the file is that list, so /tokens is
// missing (one line) and HDF5 is never asked to open it.
TEST(H5, ALegacyFileThatCrashesHdf5IsOneLine) {
  const std::string corpus = std::string(THX_SOURCE_DIR) + "/tests/fuzz/corpus/shard/";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"hdf5-division-by-zero.h5", ": damaged: HDF5 crashed reading it (Floating point exception); the file has no "
                                   "thx checksum block (written before thx had one)"},
      {"hdf5-division-by-zero-unlisted.h5", ": missing dataset /tokens"},
  };
  for (const auto& [name, expect] : cases) {
    const std::string path = corpus + name;
    const std::string e = test::error_of([&] {
      H5Reader r(path);
      r.read("/tokens");
      r.read("/doc_offsets");
    });
    EXPECT_EQ(e, path + expect);
  }
  const std::string sound = std::string(THX_SOURCE_DIR) + "/tests/fuzz/corpus/shard/train-no-checksum.h5";
  EXPECT_GT(H5Reader(sound).read("/tokens").numel(), 0);
}

// A folder that this user may not write in refuses a report's path before the work (bench --out).
// Root writes in any folder (its permission bits do not bind it), so this runs for other users.
TEST(OutputPaths, AFolderNotWritableRefusesAReportsPath) {
  if (::geteuid() == 0) GTEST_SKIP() << "running as root, which may write in any folder";
  test::TempDir dir;
  const std::string locked = dir.file("locked");
  std::filesystem::create_directories(locked);
  std::filesystem::permissions(locked, std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
  try {
    check_output_file(locked + "/r.md", "--out");
    ADD_FAILURE() << "a folder without write permission was taken";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "--out " + locked + "/r.md: cannot write in directory " + locked +
                                         " (Permission denied)");
  }
  std::filesystem::permissions(locked, std::filesystem::perms::owner_all);
  EXPECT_NO_THROW(check_output_file(locked + "/r.md", "--out"));
}

// A path that is a pipe (or a device, a socket, a link to one: /dev/stdout) is refused, by the
// check before the work and by the atomic write itself: the rename into place would replace it
// (as root, /dev/full's node or /dev/stdout's link became a regular file). A link to a regular
// file, and a new file, are written as before.
TEST(OutputPaths, ADevicePipeOrSocketIsNotReplacedByAFile) {
  test::TempDir dir;
  const std::string pipe = dir.file("pipe");
  ASSERT_EQ(::mkfifo(pipe.c_str(), 0644), 0);
  const std::string tail = "thx writes its files whole, through a temporary file renamed into place, which would "
                           "replace it; name a file in a folder";
  EXPECT_EQ(test::error_of([&] { check_output_file(pipe, "--out"); }), "--out " + pipe + ": is a pipe; " + tail);
  EXPECT_EQ(test::error_of([&] { write_file_atomic(pipe, "x\n"); }), pipe + ": is a pipe; " + tail);
  const std::string link = dir.file("link");
  std::filesystem::create_symlink(pipe, link);
  EXPECT_EQ(test::error_of([&] { write_file_atomic(link, "x\n"); }), link + ": is a pipe; " + tail);
  EXPECT_TRUE(std::filesystem::is_fifo(pipe));
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  if (std::filesystem::exists("/dev/null"))  // read only: nothing is written to it
    EXPECT_EQ(test::error_of([] { check_output_file("/dev/null", "--out"); }),
              "--out /dev/null: is a device; " + tail);
  const std::string file = dir.write("file", "old\n"), to_file = dir.file("to_file");
  std::filesystem::create_symlink(file, to_file);
  EXPECT_NO_THROW(write_file_atomic(to_file, "new\n"));
  EXPECT_NO_THROW(write_file_atomic(dir.file("fresh"), "new\n"));
  EXPECT_EQ(read_file(dir.file("fresh")), "new\n");
}

TEST(Csv, QuotesBlankLinesAndErrors) {
  test::TempDir dir;
  const auto t = read_csv(dir.write("a.csv", "x,y\r\n1,\"a, \"\"b\"\"\"\n\n2,\"multi\nline\"\n"));
  ASSERT_EQ(t.rows.size(), 2u);
  EXPECT_EQ(t.rows[0].at("y"), "a, \"b\"");
  EXPECT_EQ(t.rows[1].at("y"), "multi\nline");
  EXPECT_EQ(t.lines[1], 4);
  try {
    read_csv(dir.write("b.csv", "x,y\n1,2\n3\n"));
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), dir.file("b.csv") + ":3: 1 fields, the header has 2");
  }
  EXPECT_THROW(read_csv(dir.write("c.csv", "x\n\"open\n")), InputError);
}

TEST(TextTable, ThreeFormats) {
  TextTable t;
  t.header = {"variant", "params"};
  t.align = "lr";
  t.rows = {{"multi_head", "2359296"}, {"a,b", "1"}};
  t.notes = {"note"};
  EXPECT_EQ(render(t, TableFormat::csv), "variant,params\nmulti_head,2359296\n\"a,b\",1\n");
  const std::string md = render(t, TableFormat::markdown);
  EXPECT_NE(md.find("| multi_head | 2359296 |"), std::string::npos) << md;
  EXPECT_NE(md.find("|------------|--------:|"), std::string::npos) << md;
  const std::string tex = render(t, TableFormat::latex);
  EXPECT_NE(tex.find("multi\\_head & 2359296 \\\\"), std::string::npos) << tex;
  EXPECT_THROW(parse_table_format("html"), InputError);
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx
