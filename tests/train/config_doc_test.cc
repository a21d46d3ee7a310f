// docs/config.md is what the field table generates (train/config_doc.h).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "zeroshard/train/config_doc.h"

namespace zeroshard {
namespace {

TEST(ConfigDoc, TheCommittedReferenceIsCurrent) {
  std::ifstream in("docs/config.md");
  ASSERT_TRUE(in) << "docs/config.md is missing";
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_TRUE(text.str() == ConfigReferenceMarkdown())
      << "docs/config.md differs from what the field table (train/config_schema.cc) generates: run "
         "`make config-doc` (bazel run //tools:config_doc > docs/config.md) and commit the result";
}

}  // namespace
}  // namespace zeroshard
