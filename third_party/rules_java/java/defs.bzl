"""Re-exports Bazel's native Java rules under the @rules_java names.

Bazel 4 parses @bazel_tools//tools/jdk (which loads this file) while resolving
toolchains for any target, C++ ones included; nothing here builds Java.
"""

java_binary = native.java_binary
java_import = native.java_import
java_library = native.java_library
java_plugin = native.java_plugin
java_runtime = native.java_runtime
java_test = native.java_test
java_toolchain = native.java_toolchain
