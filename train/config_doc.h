// docs/config.md, the config reference, generated from the field table
// (train/config_schema.h): every key with its type, default, allowed values,
// the FSDP / DeepSpeed key it answers to, its flag and its help, by section,
// and short sections on _base_, --set, flags and DeepSpeed configs.
//
//   bazel run //tools:config_doc > docs/config.md      (make config-doc)
//
// tests/train/config_doc_test.cc fails when the committed file differs.
#ifndef ZEROSHARD_TRAIN_CONFIG_DOC_H_
#define ZEROSHARD_TRAIN_CONFIG_DOC_H_

#include <string>

namespace zeroshard {

std::string ConfigReferenceMarkdown();

}  // namespace zeroshard

#endif  // ZEROSHARD_TRAIN_CONFIG_DOC_H_
