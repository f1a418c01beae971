"""Device profiles: shipped set, validation, user overrides, TVM targets."""

import pytest

from edgetune import _tvm
from edgetune.errors import ProfileError
from edgetune.profiles import get_profile, load_profiles, normalize_arch, parse_profile


def test_shipped_profiles():
    profiles = load_profiles()
    assert {"host", "pi4", "pi5", "pi4-32", "jetson-orin-nano"} <= set(profiles)
    assert profiles["pi4"].target["mcpu"] == "cortex-a72" and profiles["pi4"].target["num-cores"] == 4
    assert profiles["pi5"].target["mcpu"] == "cortex-a76"
    assert profiles["pi4-32"].arch == "armv7l" and profiles["pi4-32"].target["mfloat-abi"] == "hard"
    jetson = profiles["jetson-orin-nano"]
    assert jetson.runtime == "cuda" and jetson.target["arch"] == "sm_87"
    assert jetson.target["host"]["mcpu"] == "cortex-a78"  # not TVM's tag default "carmel"


@pytest.mark.parametrize("name", ["host", "pi4", "pi5", "pi4-32", "jetson-orin-nano"])
def test_every_profile_is_a_valid_tvm_target(name):
    target = _tvm.make_target(get_profile(name).target_spec())
    data = _tvm.target_to_json(target)
    assert data["kind"] in ("llvm", "cuda")
    if name == "host":
        assert data["num-cores"] >= 1 and data["mcpu"] != "native"


def test_unknown_key_is_an_error():
    base = {"description": "x", "arch": "aarch64", "runtime": "cpu", "target": {"kind": "llvm"}}
    with pytest.raises(ProfileError, match="unknown key 'mcpu'"):
        parse_profile("bad", dict(base, mcpu="cortex-a72"), "test")
    with pytest.raises(ProfileError, match=r"unknown key \[toolchain\] 'compiler'"):
        parse_profile("bad", dict(base, toolchain={"compiler": "gcc"}), "test")
    with pytest.raises(ProfileError, match="arch 'mips'"):
        parse_profile("bad", dict(base, arch="mips"), "test")
    with pytest.raises(ProfileError, match="cuda-major"):
        parse_profile("bad", dict(base, runtime="cuda"), "test")


def test_bad_tvm_target_key_is_reported():
    with pytest.raises(ProfileError, match="bogus"):
        _tvm.make_target({"kind": "llvm", "bogus": 1})


def test_user_directory_adds_and_overrides(tmp_path, monkeypatch):
    (tmp_path / "mybox.toml").write_text(
        'description = "my box"\narch = "aarch64"\nruntime = "cpu"\n[target]\nkind = "llvm"\n'
        'mtriple = "aarch64-linux-gnu"\nmcpu = "cortex-a53"\nnum-cores = 4\n'
    )
    (tmp_path / "pi4.toml").write_text(
        'description = "overridden"\narch = "aarch64"\nruntime = "cpu"\n[target]\nkind = "llvm"\n'
    )
    monkeypatch.setenv("EDGETUNE_TARGETS_DIR", str(tmp_path))
    profiles = load_profiles()
    assert profiles["mybox"].source.endswith("mybox.toml")
    assert profiles["pi4"].description == "overridden"


def test_user_profile_typo_names_the_file(tmp_path, monkeypatch):
    (tmp_path / "typo.toml").write_text('description = "x"\narch = "aarch64"\nruntime = "cpu"\nrutime = "cpu"\n[target]\nkind = "llvm"\n')
    monkeypatch.setenv("EDGETUNE_TARGETS_DIR", str(tmp_path))
    with pytest.raises(ProfileError, match=r"typo.*unknown key 'rutime'"):
        load_profiles()


def test_unknown_profile_suggests():
    with pytest.raises(ProfileError) as info:
        get_profile("pi-4")
    assert "unknown device profile 'pi-4'" in info.value.message
    assert "pi4" in info.value.hint


@pytest.mark.parametrize("raw,arch", [("arm64", "aarch64"), ("aarch64", "aarch64"), ("armv7l", "armv7l"), ("armv8l", "armv7l"), ("AMD64", "x86_64")])
def test_normalize_arch(raw, arch):
    assert normalize_arch(raw) == arch
