// Prints docs/config.md, the config reference generated from the field table
// of train/config_schema.cc:
//
//   bazel run //tools:config_doc > docs/config.md     (or: make config-doc)
#include <cstdio>

#include "zeroshard/train/config_doc.h"

int main() {
  std::fputs(zeroshard::ConfigReferenceMarkdown().c_str(), stdout);
  return 0;
}
