// ConfigTree (merging, --set, origins) and schema.h (strict typed reading, writing).
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>

#include "common/config_tree.h"
#include "common/error.h"
#include "common/schema.h"
#include "test_util.h"

namespace thx {
namespace {
namespace THX_FILE_ID {

struct Inner {
  int64_t a = 1;
  std::optional<int64_t> b;
  std::vector<std::string> list;
};
template <class V>
void visit(V& v, Inner& c) {
  v("a", c.a, "an integer");
  v("b", c.b, "optional");
  v("list", c.list);
}
struct Outer {
  std::string name = "x";
  double rate = 0.5;
  bool flag = false;
  Inner inner;
};
template <class V>
void visit(V& v, Outer& c) {
  v("name", c.name);
  v("rate", c.rate);
  v("flag", c.flag);
  v("inner", c.inner);
}

std::string error_of(const ConfigTree& t) {
  try {
    cfg::read<Outer>(t.root());
  } catch (const ConfigError& e) {
    return t.describe(e);
  }
  return "";
}

TEST(ConfigTree, MergesFilesInOrderAndSetWins) {
  test::TempDir dir;
  const auto a = dir.write("a.yaml", "name: first\ninner:\n  a: 2\n  list: [p, q]\n");
  const auto b = dir.write("b.yaml", "inner:\n  b: 7\nrate: 0.25\n");
  ConfigTree t;
  t.merge_file(a);
  t.merge_file(b);
  t.set("inner.a=5");
  t.set("inner.list=[r]");
  const Outer o = cfg::read<Outer>(t.root());
  EXPECT_EQ(o.name, "first");
  EXPECT_EQ(o.rate, 0.25);
  EXPECT_EQ(o.inner.a, 5);
  EXPECT_EQ(o.inner.b, 7);
  EXPECT_EQ(o.inner.list, std::vector<std::string>{"r"});
  EXPECT_EQ(t.origin("name"), a + ":1");
  EXPECT_EQ(t.origin("inner.b"), b + ":2");
  EXPECT_EQ(t.origin("inner.a"), "--set inner.a=5");
  EXPECT_EQ(t.origin("flag"), "defaults");
}

// A relative path is taken against the file that wrote it; one from --set or from YAML text (a
// run's stored config) against the working directory. The result does not depend on the
// directory the command ran in, except for what the command line itself gives.
TEST(ConfigTree, RelativePathsFollowTheFileThatWroteThem) {
  test::TempDir dir;
  std::filesystem::create_directories(dir.file("configs/sub"));
  const auto cfg = dir.write("configs/sub/run.yaml", "name: ../../data/p\ninner: {list: [x]}\n");
  const auto sweep = dir.write("configs/sweep.yaml", "");
  auto resolved = [&](const std::function<void(ConfigTree&)>& more) {
    ConfigTree t;
    t.merge_file(cfg);
    more(t);
    t.resolve_paths({"name", "absent.key", "inner.list"});
    return t.root()["name"].as<std::string>();
  };
  const std::string cwd = std::filesystem::current_path().string();
  EXPECT_EQ(resolved([](ConfigTree&) {}), dir.file("data/p"));
  {  // the same from another working directory
    const auto here = std::filesystem::current_path();
    std::filesystem::current_path(dir.file("configs"));
    EXPECT_EQ(resolved([](ConfigTree&) {}), dir.file("data/p"));
    std::filesystem::current_path(here);
  }
  EXPECT_EQ(resolved([](ConfigTree& t) { t.set("name=q/r"); }), cwd + "/q/r");
  {  // a --set inside a block the file wrote: the working directory's, not the file's
    ConfigTree t;
    t.merge_file(dir.write("configs/sub/block.yaml", "inner: {a: 1, list: [x]}\n"));
    t.set("inner.list=[y]");
    t.set("inner.b=2");
    t.merge_text("inner: {note: n/p}\n", "text");
    t.set("name=rel/p");
    t.resolve_paths({"inner.note", "name"});
    EXPECT_EQ(t.root()["inner"]["note"].as<std::string>(), cwd + "/n/p");
    EXPECT_EQ(t.root()["name"].as<std::string>(), cwd + "/rel/p");
  }
  EXPECT_EQ(resolved([](ConfigTree& t) { t.set("name=/abs/olute"); }), "/abs/olute");
  EXPECT_EQ(resolved([&](ConfigTree& t) {
              t.note_file(sweep);  // a sweep's overrides: relative to the sweep file
              t.set("name", YAML::Node("d"), sweep);
            }),
            dir.file("configs/d"));
  ConfigTree text;
  text.merge_text("name: stored/p\n", "run/config.yaml");
  text.resolve_paths({"name"});
  EXPECT_EQ(text.root()["name"].as<std::string>(), cwd + "/stored/p");
}

TEST(ConfigTree, ErrorsNameFileLineKeyAndAllowed) {
  test::TempDir dir;
  ConfigTree t;
  t.merge_file(dir.write("c.yaml", "name: ok\ninner:\n  a: 3\n  c: 4\n"));
  EXPECT_EQ(error_of(t), dir.file("c.yaml") + ":4: inner.c: unknown key; allowed keys under "
                                              "inner: a, b, list");
  ConfigTree u;
  u.merge_file(dir.write("d.yaml", "inner:\n  a: three\n"));
  EXPECT_EQ(error_of(u), dir.file("d.yaml") + ":2: inner.a: expected an integer, got 'three'");
  ConfigTree v;
  v.set("rate=fast");
  EXPECT_EQ(error_of(v), "--set rate=fast: rate: expected a finite number, got 'fast'");
  ConfigTree w;
  w.set("inner.list=p");
  EXPECT_EQ(error_of(w), "--set inner.list=p: inner.list: expected a list such as [a, b], got 'p'");
  ConfigTree x;
  x.merge_text("nmae: typo\n", "x.yaml");
  EXPECT_EQ(error_of(x),
            "x.yaml:1: nmae: unknown key; allowed top-level keys: name, rate, flag, inner");
  ConfigTree y;
  y.merge_text("inner: 5\n", "y.yaml");
  EXPECT_EQ(error_of(y), "y.yaml:1: inner: expected a mapping of keys, got '5'");
  ConfigTree z;
  z.set("inner.a=2.5");
  EXPECT_EQ(error_of(z), "--set inner.a=2.5: inner.a: expected an integer, got '2.5'");
  // A key nothing set (a required one, or a default another key rules out): no place, and why.
  ConfigTree none;
  none.merge_text("name: n\n", "n.yaml");
  EXPECT_EQ(none.describe(ConfigError("inner.a", "is required")),
            "inner.a: is required (not set by any --config or --set)");
  // A line that names its key first (the memory bound's) keeps it, after the place or before why.
  const ConfigError leads = ConfigError::leading("inner.a", "inner.a 3: needs 9 GB");
  EXPECT_EQ(leads.line(), "inner.a 3: needs 9 GB");
  EXPECT_EQ(ConfigError("inner.a", "is odd").line(), "inner.a: is odd");
  EXPECT_EQ(none.describe(leads), "inner.a 3: needs 9 GB (inner.a: not set by any --config or --set)");
  ConfigTree set;
  set.merge_text("inner:\n  a: 3\n", "s.yaml");
  EXPECT_EQ(set.describe(leads), "s.yaml:2: inner.a 3: needs 9 GB");
}

// told(f): a check after the config was read throws a ConfigError; it comes out described.
TEST(ConfigTree, ToldDescribesAConfigErrorThrownAfterReading) {
  ConfigTree t;
  t.merge_text("name: n\nrate: 2\n", "t.yaml");
  EXPECT_EQ(t.told([] { return 7; }), 7);
  try {
    t.told([]() -> int { throw ConfigError("rate", "2 is more than the data allows"); });
    FAIL() << "no error";
  } catch (const ConfigError&) {
    FAIL() << "not described";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "t.yaml:2: rate: 2 is more than the data allows");
  }
  EXPECT_THROW(t.told([] { throw InputError("x: other"); }), InputError);  // (as it was)
}

TEST(ConfigTree, BadFilesAndOverridesAreInputErrors) {
  test::TempDir dir;
  ConfigTree t;
  EXPECT_THROW(t.merge_file(dir.file("missing.yaml")), InputError);
  try {
    t.merge_file(dir.write("bad.yaml", "a: [1, 2\nb: 3\n"));
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.yaml:"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("invalid YAML"), std::string::npos) << e.what();
  }
  EXPECT_THROW(t.merge_text("- a\n- b\n", "list.yaml"), InputError);  // top level not a map
  EXPECT_THROW(t.set("novalue"), InputError);
  EXPECT_THROW(t.set("=3"), InputError);
  EXPECT_THROW(t.set("a..b=3"), InputError);
  EXPECT_THROW(t.set("a=[1,"), InputError);
  t.set("name=x");
  EXPECT_THROW(t.set("name.sub=1"), InputError);  // name holds a scalar
}

// --set's keys: one with nothing before '=' or an empty part is refused with the reason.
TEST(ConfigTree, SetNamesWhatIsWrongWithItsKey) {
  ConfigTree t;
  auto error = [&](const std::string& assignment) { return test::error_of([&] { t.set(assignment); }); };
  EXPECT_EQ(error("=3"), "--set =3: expected KEY=VALUE, e.g. --set attention.h=24");
  EXPECT_EQ(error("inner.a.=3"), "--set inner.a.=3: empty component in key 'inner.a.'");
  EXPECT_EQ(error(".a=3"), "--set .a=3: empty component in key '.a'");
  // A block that a file left empty (null) takes subkeys; one holding a value does not.
  t.merge_text("inner:\nname: n\n", "n.yaml");
  t.set("inner.a=4");
  EXPECT_EQ(cfg::read<Outer>(t.root()).inner.a, 4);
  EXPECT_EQ(error("name.x=1"), "--set name.x=1: 'name' holds a value, not a mapping of keys");
}

// Origins: a list's element was written where its list was; a subtree replaced by a value
// forgets its keys' origins; take() moves a block's origins and no other block's, even one whose
// name begins with it (attention and attention_encoder_self).
TEST(ConfigTree, OriginsFollowListsReplacementsAndTakenBlocks) {
  ConfigTree t;
  t.merge_text("inner:\n  a: 2\n  list: [p, q]\ninner_x: 5\nname: n\n", "o.yaml");
  EXPECT_EQ(t.origin("inner.list[1]"), "o.yaml:3");
  const ConfigTree taken = t.take("inner");
  EXPECT_EQ(taken.origin("inner.a"), "o.yaml:2");
  EXPECT_EQ(t.origin("inner.a"), "defaults");
  EXPECT_EQ(t.origin("inner_x"), "o.yaml:4");
  ConfigTree r;
  r.merge_text("inner:\n  a: 2\n", "a.yaml");
  r.merge_text("inner: 5\n", "b.yaml");
  EXPECT_EQ(r.origin("inner"), "b.yaml:1");
  EXPECT_EQ(r.origin("inner.a"), "defaults");
}

// inherit(): a child block gets what its parent sets and it does not, into nested blocks too,
// with their origins; an empty path stays empty when paths are resolved (a required key's check
// must still see it unset).
TEST(ConfigTree, InheritanceReachesNestedBlocksAndEmptyPathsStayEmpty) {
  ConfigTree t;
  t.merge_text("child:\n  inner: {a: 1}\nparent:\n  inner: {a: 9, b: 2}\n  rate: 3\n", "i.yaml");
  t.inherit("child", "parent");
  EXPECT_EQ(t.root()["child"]["inner"]["a"].as<int>(), 1);
  EXPECT_EQ(t.root()["child"]["inner"]["b"].as<int>(), 2);
  EXPECT_EQ(t.root()["child"]["rate"].as<int>(), 3);
  EXPECT_EQ(t.origin("child.inner.b"), "i.yaml:4");
  test::TempDir dir;
  ConfigTree p;
  p.merge_file(dir.write("p.yaml", "name: ''\n"));
  p.resolve_paths({"name"});
  EXPECT_EQ(p.root()["name"].as<std::string>(), "");
}

TEST(Schema, NullOptionalAndEmptyFile) {
  ConfigTree t;
  t.merge_text("", "empty.yaml");
  t.merge_text("inner:\n  b: ~\n", "n.yaml");
  const Outer o = cfg::read<Outer>(t.root());
  EXPECT_FALSE(o.inner.b.has_value());
  EXPECT_EQ(o.inner.a, 1);  // default kept
}

TEST(Schema, WriterRoundTripsThroughReader) {
  Outer o;
  o.name = "talking heads";
  o.rate = 1e-3;
  o.flag = true;
  o.inner.a = -4;
  o.inner.b = 9;
  o.inner.list = {"X_l", "M_w"};
  const std::string yaml = cfg::to_yaml(o);
  EXPECT_NE(yaml.find("# an integer"), std::string::npos) << yaml;
  ConfigTree t;
  t.merge_text(yaml, "dump");
  const Outer r = cfg::read<Outer>(t.root());
  EXPECT_EQ(r.name, o.name);
  EXPECT_EQ(r.rate, o.rate);
  EXPECT_EQ(r.flag, o.flag);
  EXPECT_EQ(r.inner.a, o.inner.a);
  EXPECT_EQ(r.inner.b, o.inner.b);
  EXPECT_EQ(r.inner.list, o.inner.list);
}

// Every InputError, RunError and ConfigError is one line, whatever its input carried: a line
// break becomes \n, other control characters \xNN; tabs and UTF-8 pass as they are.
TEST(ErrorMessages, AreOneLineByConstruction) {
  EXPECT_EQ(one_line("a\nb\r\x1b[31m\x7f\tc \xce\xa6"), "a\\nb\\r\\x1b[31m\\x7f\tc \xce\xa6");
  EXPECT_STREQ(InputError("f.yaml:2: key 'x\ny'").what(), "f.yaml:2: key 'x\\ny'");
  EXPECT_STREQ(RunError("disk\nfull").what(), "disk\\nfull");
  const ConfigError c("a\nb", "bad\nvalue");
  EXPECT_EQ(c.key, "a\\nb");
  EXPECT_STREQ(c.what(), "bad\\nvalue");
}

}  // namespace THX_FILE_ID
}  // namespace
}  // namespace thx
