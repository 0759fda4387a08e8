# lit configuration for kiln's text tests: .kir files run through `kiln` and checked with
# FileCheck. `%kiln` is the CLI; `not` inverts an exit code.
import os
import lit.formats

config.name = "kiln"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".kir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = config.kiln_test_exec_root
config.excludes = ["lit.cfg.py", "lit.site.cfg.py.in", "Inputs"]

config.environment["PATH"] = os.pathsep.join(
    [config.kiln_bin_dir, config.llvm_tools_dir, config.environment.get("PATH", os.environ.get("PATH", ""))])
# CUDA tests that need NVRTC (a toolkit, not a GPU) are reported UNSUPPORTED without it.
if config.kiln_has_nvrtc:
    config.available_features.add("nvrtc")
# Tests must not share a disk cache with the user or with each other.
config.environment["KILN_CACHE"] = "off"
config.substitutions.append(("%kiln", os.path.join(config.kiln_bin_dir, "kiln")))
config.substitutions.append(("%src", config.kiln_source_dir))
config.substitutions.append(("%plugin", os.path.join(config.kiln_lib_dir, "libkiln_sample_plugin.so")))
config.substitutions.append(("%userplugin", os.path.join(config.kiln_lib_dir, "libkiln_user_plugin.so")))
config.substitutions.append(("%plainplugin", os.path.join(config.kiln_lib_dir, "libkiln_user_plugin_plain.so")))
# A shared library that is not a plugin (zlib is on every Debian system).
import glob as _glob
_libz = sorted(_glob.glob("/usr/lib/*/libz.so.1") + _glob.glob("/lib/*/libz.so.1"))
config.substitutions.append(("%libz", _libz[0] if _libz else "/nonexistent/libz.so.1"))
config.substitutions.append(("%mirror", os.path.join(config.kiln_lib_dir, "libkiln_mirror_backend.so")))
