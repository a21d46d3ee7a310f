#include "zeroshard/train/config_doc.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "zeroshard/train/config.h"
#include "zeroshard/train/config_schema.h"

namespace zeroshard {
namespace {

using config_internal::DescribeInt;
using config_internal::Quoted;
using Json = nlohmann::json;

std::string Cell(const std::string& s) { return absl::StrReplaceAll(s, {{"|", "\\|"}, {"\n", " "}}); }
std::string Code(const std::string& s) { return s.empty() ? "" : absl::StrCat("`", s, "`"); }

std::string TypeOf(const ConfigField& f) {
  switch (f.kind) {
    case FieldKind::kBool: return "bool";
    case FieldKind::kInt: return "int";
    case FieldKind::kNumber: return "number";
    case FieldKind::kString: return "string";
    case FieldKind::kChoice: return "enum";
    case FieldKind::kDType: return "dtype";
    case FieldKind::kStrings: return "list of strings";
    default: return f.type_text;
  }
}

std::string AllowedOf(const ConfigField& f) {
  switch (f.kind) {
    case FieldKind::kInt: return DescribeInt(f.min, f.max).substr(std::string("an integer ").size());
    case FieldKind::kNumber: {
      const std::string d = f.range.Describe("x");
      return d == "x" ? "" : d.substr(2);
    }
    case FieldKind::kChoice: return absl::StrReplaceAll(Quoted(f.choices), {{", ", " \\| "}});
    case FieldKind::kDType: return "\"f32\" \\| \"bf16\" \\| \"f16\"";
    default: return Cell(f.allowed_text);
  }
}

std::string DefaultOf(const ConfigField& f) {
  RunConfig gpt = DefaultRunConfig();
  RunConfig resnet = DefaultRunConfig();
  resnet.model_type = "resnet";
  resnet.train.sharding.wrap = WrapPolicy::ByType({"BasicBlock"});  // as model.type "resnet" sets it
  const std::string g = f.get(gpt).dump(), r = f.get(resnet).dump();
  if (f.models == kResNetOnly) return Code(r);
  if (f.models == kBothModels && g != r && f.path != "model.type") return absl::StrCat(Code(g), " (resnet: ", Code(r), ")");
  return Code(g);
}

std::string FlagsOf(const ConfigField& f) {
  std::vector<std::string> names;
  for (const ConfigFlag& flag : f.flags) names.push_back(absl::StrCat("`--", flag.name, "`"));
  return absl::StrJoin(names, ", ");
}

const char kIntro[] = R"(# The config reference

<!-- Generated from the field table in train/config_schema.cc by //tools:config_doc:
     run `make config-doc` after changing it (tests/train/config_doc_test.cc checks). -->

The main job (`train_gpt`) runs one JSON config: the built-in defaults, then the
`--config` file, then the flags given on the command line, then every
`--set key.path=value` in order. The whole config is checked before anything
starts; every problem is reported at once, one per line, with its key path and,
for a misspelt key or value, the closest valid one. `--print_config` prints the
resolved config (every default filled in; it reads back to the same run), and a
run folder keeps it as `config.json`. `examples/configs/` holds ready configs.

## `_base_`: inheritance

`{"_base_": "default.json", ...}` reads `default.json` (relative to this file)
and merges this file over it, objects key by key, anything else replaced
(MMEngine's inheritance; at most 8 levels). JSON comments (`//`, `/* */`) are
allowed.

## `--set` and flags

`--set key.path=value` sets one key (repeat it for more). The value is read as
the key's type: text for a string key, `true/false/1/0/yes/no/on/off` for a
boolean key, otherwise JSON (numbers, `null`, arrays, objects); an array element
is `optimizer.betas.1=0.99`. The flags in the tables below are shorthands that
mean the same with or without `--config` (`--steps=50` is
`--set train.steps=50`); a boolean flag is also `--name` / `--noname`.
`train_gpt --help` lists them with their defaults.

## DeepSpeed configs

A `"deepspeed"` block holds DeepSpeed's own keys (`zero_optimization`, `bf16`,
`fp16`, `optimizer`, `scheduler`, `aio`, `gradient_clipping`, ...), an
alternative to the `strategy` keys; Note [DeepSpeed mapping] in
`train/deepspeed_config.cc` says what each becomes, and the *peer* column below
names the DeepSpeed key each config key answers to. A setting given both ways is
an error unless exactly one side comes from the command line, which wins. A
DeepSpeed config file on its own (a top-level `zero_optimization`,
`train_micro_batch_size_per_gpu` or `train_batch_size`, and none of the keys
below) is read as that block of a default config. Its `scheduler` (`WarmupLR`,
`WarmupDecayLR`, `WarmupCosineLR`) becomes `lr_schedule` with a linear warmup
(`"warmup_type": "linear"`; DeepSpeed's default `"log"` is refused). The
resolved config shows what the block mapped to.

## `model.type "resnet"`

`"model": {"type": "resnet"}` runs the vision job (a ResNet on the generated
ShapesData set, `docs/vision.md`). Rows marked *gpt* are errors there and rows
marked *resnet* are errors for the GPT; where the defaults differ the table
gives both.
)";

}  // namespace

std::string ConfigReferenceMarkdown() {
  std::string md = kIntro;
  const std::string header = "| key | type | default | allowed | peer | flag | help |\n| --- | --- | --- | --- | --- | --- | --- |\n";
  bool in_table = false;
  auto start = [&](const std::string& title, const std::string& help) {
    absl::StrAppend(&md, "\n## `", title, "`\n\n", help.empty() ? "" : absl::StrCat(help, ".\n\n"), header);
    in_table = true;
  };
  for (const ConfigField& f : ConfigFields()) {
    if (f.kind == FieldKind::kSection) {
      if (f.parent().empty()) {
        start(f.path, f.help);
      } else {
        absl::StrAppend(&md, "| ", Code(f.path), " | object |  |  |  |  | ", Cell(f.help), " |\n");
      }
      continue;
    }
    if (!in_table) start("top level", "");
    if (f.path == "deepspeed") {
      start("deepspeed", f.help);
    }
    const std::string only = f.models == kGptOnly ? " *(gpt)*" : f.models == kResNetOnly ? " *(resnet)*" : "";
    absl::StrAppend(&md, "| ", Code(f.path), only, " | ", Cell(TypeOf(f)), " | ", f.written ? DefaultOf(f) : "",
                    " | ", AllowedOf(f), " | ", Cell(f.peer), " | ", FlagsOf(f), " | ", Cell(f.help), " |\n");
  }
  return md;
}

}  // namespace zeroshard
