"""`zs_install_tree`: the installed form of the library, built by Bazel.

    zs_install_tree(name = "install_tree", deps = [":zeroshard"])

makes the directory `<name>/` (relocatable: `make install PREFIX=...` copies
it) with

    include/zeroshard/...                 every header of the project that
                                          `deps` reach, as the build presents
                                          them (tools/cc.bzl's prefix)
    lib/libzeroshard.a                    every object of the project's
                                          libraries that `deps` reach (static
                                          op registrations included: link it
                                          whole, see the CMake target)
    lib/libzeroshard.so                   the same objects as one shared
                                          library, linked with -z defs against
                                          its dependencies (Abseil, OpenMP,
                                          MPI, liburing, and CUDA when built
                                          with it)
    lib/cmake/zeroshard/zeroshardConfig.cmake, zeroshardConfigVersion.cmake
    lib/pkgconfig/zeroshard.pc
    share/zeroshard/link_flags.txt        what the static library needs

The CUDA kernels, when the build has them, are in the same two libraries.
tools/install_tree.sh does the work; this rule hands it the files.
"""

load("@bazel_tools//tools/cpp:toolchain_utils.bzl", "find_cpp_toolchain")

def _own(label, ctx):
    return label.workspace_name == ctx.label.workspace_name

def _installed_header_path(f):
    """zeroshard/<path> for a header as the build presents it, else None:
    .../_virtual_includes/<target>/zeroshard/<path> (tools/cc.bzl's prefix) or
    .../<name>_prefixed/zeroshard/<path> (zs_prefixed_headers)."""
    i = f.path.find("/_virtual_includes/")
    if i >= 0:
        rest = f.path[i + len("/_virtual_includes/"):].split("/", 1)
        if len(rest) == 2 and rest[1].startswith("zeroshard/"):
            return rest[1]
        return None
    i = f.path.find("_prefixed/zeroshard/")
    if i >= 0:
        return f.path[i + len("_prefixed/"):]
    return None

def _zs_install_tree_impl(ctx):
    cc_toolchain = find_cpp_toolchain(ctx)
    infos = [d[CcInfo] for d in ctx.attr.deps]

    headers = {}
    for info in infos:
        for f in info.compilation_context.headers.to_list():
            if not _own(f.owner, ctx):
                continue
            dest = _installed_header_path(f)
            if dest and dest not in headers:
                headers[dest] = f

    archives = []
    seen_archives = {}
    flags = []
    seen_flags = {}
    for info in infos:
        for linker_input in info.linking_context.linker_inputs.to_list():
            for flag in linker_input.user_link_flags:
                if flag not in seen_flags:
                    seen_flags[flag] = True
                    flags.append(flag)
            if not _own(linker_input.owner, ctx):
                continue
            for lib in linker_input.libraries:
                archive = lib.pic_static_library or lib.static_library
                if archive and archive.path not in seen_archives:
                    seen_archives[archive.path] = True
                    archives.append(archive)

    defines = []
    for info in infos:
        for d in info.compilation_context.defines.to_list():
            if d not in defines:
                defines.append(d)

    header_list = ctx.actions.declare_file(ctx.label.name + ".headers")
    ctx.actions.write(header_list, "".join(["%s %s\n" % (dest, headers[dest].path) for dest in sorted(headers.keys())]))
    archive_list = ctx.actions.declare_file(ctx.label.name + ".archives")
    ctx.actions.write(archive_list, "".join([a.path + "\n" for a in archives]))
    flag_list = ctx.actions.declare_file(ctx.label.name + ".flags")
    ctx.actions.write(flag_list, "".join([f + "\n" for f in flags]))
    define_list = ctx.actions.declare_file(ctx.label.name + ".defines")
    ctx.actions.write(define_list, "".join([d + "\n" for d in defines]))

    out = ctx.actions.declare_directory(ctx.label.name)
    ctx.actions.run(
        executable = ctx.executable._script,
        arguments = [
            out.path,
            header_list.path,
            archive_list.path,
            flag_list.path,
            define_list.path,
            cc_toolchain.compiler_executable,
            ctx.attr.version,
            "1" if ctx.attr.cuda else "0",
        ],
        inputs = depset(
            [header_list, archive_list, flag_list, define_list] + headers.values() + archives,
            transitive = [cc_toolchain.all_files],
        ),
        outputs = [out],
        mnemonic = "ZeroshardInstallTree",
        progress_message = "Assembling the install tree %s" % out.short_path,
        use_default_shell_env = True,
    )
    return [DefaultInfo(files = depset([out]))]

zs_install_tree = rule(
    implementation = _zs_install_tree_impl,
    attrs = {
        "deps": attr.label_list(providers = [CcInfo]),
        "version": attr.string(mandatory = True),
        "cuda": attr.bool(default = False),
        "_script": attr.label(
            default = "//tools:install_tree",
            executable = True,
            cfg = "exec",
        ),
        "_cc_toolchain": attr.label(default = "@bazel_tools//tools/cpp:current_cc_toolchain"),
    },
    toolchains = ["@bazel_tools//tools/cpp:toolchain_type"],
)
