"""The harness held fixed: the constraints files pin every package of their extra, and
environment.json records the harness that ran (its packages, the digest of its sources,
the constraints file they match). CPU only.
"""
from __future__ import annotations

import configparser
import hashlib
import json
import shutil
import time
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from fixtures.plugins.environment import survey as env_mod
from reports import fingerprint as fp_mod, schemas

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


# ---------------------------------------------------------------- the constraints files

@pytest.mark.parametrize("extra", sorted(PYPROJECT["optional-dependencies"]))
def test_constraints_file_pins_every_requirement_of_its_extra(extra):
    path = ROOT / "constraints" / f"{extra}.txt"
    assert path.is_file(), f"no constraints file for the extra {extra}"
    text = path.read_text()
    assert text.startswith(f"# constraints/{extra}.txt: ") and "constraints/update.sh" in text
    pins = env_mod.read_pins(path)
    body = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    assert len(body) == len(pins) and all("==" in ln for ln in body), "every line an exact pin"
    for req in map(Requirement, PYPROJECT["dependencies"] + PYPROJECT["optional-dependencies"][extra]):
        name = env_mod._canon(req.name)
        assert name in pins, f"{path.name} does not pin {req.name}"
        assert req.specifier.contains(pins[name], prereleases=True), \
            f"{path.name}: {name}=={pins[name]} outside pyproject's {req}"


def test_ci_and_tox_install_under_the_constraints():
    run = (ROOT / ".ci" / "run").read_text()
    assert 'pip install -q -e ".[$2]" -c "constraints/$2.txt"' in run
    ini = configparser.ConfigParser(interpolation=None)
    ini.read(ROOT / "tox.ini")
    env = ini["testenv"]
    assert "skipsdist" not in ini["tox"] and env["package"] == "editable" and env["extras"] == "cu13"
    assert "-c {toxinidir}/constraints/cu13.txt" in env["install_command"]
    for name in ("selftest", "conformance"):   # the env's python: no allowlist_externals needed
        assert ini[f"testenv:{name}"]["commands"].startswith("python -m pytest ")


def test_read_pins(tmp_path):
    f = tmp_path / "c.txt"
    f.write_text("# a header\nPygments==2.21.0\nprometheus_client==0.26.0  # why\n"
                 "numpy==2.4.6 ; python_version < '3.12'\nfoo>=1\n\n")
    assert env_mod.read_pins(f) == {"pygments": "2.21.0", "prometheus-client": "0.26.0", "numpy": "2.4.6"}


# ---------------------------------------------------------------- match / differ

PINS = {"constraints/cu13.txt": {"numpy": "2.5.2", "pytest": "9.1.1", "cupy-cuda13x": "14.2.0",
                                 "filelock": "4.3.1"},
        "constraints/cu12.txt": {"numpy": "2.5.2", "pytest": "9.1.1", "cupy-cuda12x": "14.2.0",
                                 "filelock": "4.3.1"}}


def test_constraints_status_names_the_file_every_pin_matches():
    have = {"numpy": "2.5.2", "pytest": "9.1.1", "cupy-cuda13x": "14.2.0", "filelock": "4.3.1",
            "extra-thing": "1.0"}
    assert env_mod.constraints_status(have, PINS) == "constraints/cu13.txt"
    have12 = dict(have, **{"cupy-cuda12x": "14.2.0"})
    del have12["cupy-cuda13x"]
    assert env_mod.constraints_status(have12, PINS) == "constraints/cu12.txt"


def test_constraints_status_lists_the_differences_from_the_closest_file():
    have = {"numpy": "2.4.6", "pytest": "9.1.1", "cupy-cuda13x": "14.2.0", "filelock": "4.3.1"}
    assert env_mod.constraints_status(have, PINS) == \
        "differs from constraints/cu13.txt: numpy 2.4.6 (pinned 2.5.2)"
    have["filelock"] = fp_mod.unavailable("not installed")
    assert env_mod.constraints_status(have, PINS) == ("differs from constraints/cu13.txt: filelock not "
                                                      "installed (pinned 4.3.1), numpy 2.4.6 (pinned 2.5.2)")


def test_constraints_status_none_matches_and_no_files():
    have = {"numpy": "2.4.6", "pytest": "9.2.0", "filelock": "4.0"}
    out = env_mod.constraints_status(have, PINS)
    assert out.startswith("none matches (closest constraints/cu12.txt: 4 of 4 pins differ: ")
    assert out.endswith("pytest 9.2.0 (pinned 9.1.1))")
    many = {"c": {f"p{i}": "1" for i in range(10)}}
    assert env_mod.constraints_status({}, many, shown=3).endswith(
        "p0 not installed (pinned 1), p1 not installed (pinned 1), p2 not installed (pinned 1), and 7 more)")
    assert env_mod.constraints_status(have, {}) == "unavailable: no constraints/*.txt"


# ---------------------------------------------------------------- the sources digest

def _copy_sources(dst: Path) -> None:
    for rel in env_mod.source_files(ROOT):
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / rel, dst / rel)


def test_sources_digest_is_stable_fast_and_ignores_what_a_run_leaves(tmp_path):
    first = env_mod.sources_digest()
    assert len(first) == 64 and env_mod.sources_digest() == first
    files = env_mod.source_files()
    assert {"conftest.py", "pyproject.toml", "tox.ini", "reports/model.py",
            "kernels/common.cuh"} <= set(files)
    assert any(f.startswith("suites/") for f in files) and any(f.startswith("fixtures/") for f in files)
    assert not any("__pycache__" in f or f.endswith(".md") or f.startswith("tests/") for f in files)
    # fast: not much more than reading and hashing the files it names, both timed here, in
    # turns (10 ms and 8 ms on an idle 2-core machine; a loaded machine slows both alike)
    def read_and_hash():
        h = hashlib.sha256()
        for f in files:
            h.update((ROOT / f).read_bytes())
    times = [(_timed(env_mod.sources_digest), _timed(read_and_hash)) for _ in range(5)]
    digest_s, least_s = min(t[0] for t in times), min(t[1] for t in times)
    assert digest_s < 3 * least_s + 0.005, \
        f"sources_digest took {digest_s * 1000:.1f} ms, reading and hashing its files {least_s * 1000:.1f} ms"
    # a clean copy: the same digest (paths are relative); what a run leaves changes nothing
    _copy_sources(tmp_path)
    assert env_mod.sources_digest(tmp_path) == first
    for junk in ("fixtures/__pycache__/x.cpython-311.pyc", "reports/out/run/results.json",
                 "reports/out/run/x.py", "suites/NOTES.md", ".tox/x/y.py", "known_issues.toml",
                 "constraints/cu13.txt", "tests/test_x.py", "kernels/x.cubin"):
        (tmp_path / junk).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / junk).write_text("x")
    assert env_mod.sources_digest(tmp_path) == first


@pytest.mark.parametrize("change", ["edit a kernel", "add a suite file", "remove a fixture", "rename"])
def test_sources_digest_changes_with_the_sources(tmp_path, change):
    _copy_sources(tmp_path)
    before = env_mod.sources_digest(tmp_path)
    if change == "edit a kernel":
        with (tmp_path / "kernels" / "common.cuh").open("a") as f:
            f.write("\n// one more line\n")
    elif change == "add a suite file":
        (tmp_path / "suites" / "test_new.py").write_text("")
    elif change == "remove a fixture":
        next((tmp_path / "fixtures").rglob("*.py")).unlink()
    else:
        (tmp_path / "tox.ini").rename(tmp_path / "kernels" / "tox.h")
    assert env_mod.sources_digest(tmp_path) != before


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


# ---------------------------------------------------------------- the harness section

def test_harness_section_has_its_keys():
    h = env_mod.harness()
    assert set(h) == {"packages", "extras", "sources_sha256", "constraints", "git_commit"}
    assert h["sources_sha256"] == env_mod.sources_digest()
    for name in ("pytest", "pytest-xdist", "pytest-timeout", "numpy", "filelock", "pluggy"):
        assert name in h["packages"], name   # the dependencies and what they require in turn
    assert h["packages"]["pytest"] == pytest.__version__
    assert isinstance(h["constraints"], str) and h["constraints"]
    assert isinstance(h["git_commit"], str)


def test_harness_packages_follow_pyproject_and_installed_extras(tmp_path):
    (tmp_path / "pyproject.toml").write_text('''
[project]
name = "x"
dependencies = ["pytest>=1", "no-such-dist-tmac>=1"]
[project.optional-dependencies]
here = ["numpy>=1"]
elsewhere = ["pytest>=1", "no-such-dist-tmac-gpu>=1"]
too-new = ["numpy>=999"]
''')
    reqs, extras = env_mod.harness_requirements(tmp_path)
    assert extras == ["here"]
    pk = env_mod.harness_packages(tmp_path)
    assert pk["pytest"] == pytest.__version__ and "pluggy" in pk and "numpy" in pk
    assert pk["no-such-dist-tmac"] == "unavailable: not installed"
    assert "no-such-dist-tmac-gpu" not in pk
    h = env_mod.harness(tmp_path)
    assert h["constraints"] == "unavailable: no constraints/*.txt"
    assert h["git_commit"] == "unavailable: not a git checkout"
    (tmp_path / "constraints").mkdir()
    (tmp_path / "constraints" / "here.txt").write_text(f"pytest=={pytest.__version__}\nnumpy==0.0.1\n")
    assert env_mod.harness(tmp_path)["constraints"].startswith(
        "differs from constraints/here.txt: numpy ")


def test_a_broken_pyproject_is_recorded_not_raised(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[project\n")
    h = env_mod.harness(tmp_path)
    assert h["packages"].startswith("unavailable: TOMLDecodeError")
    assert h["constraints"] == "unavailable: no package versions"


def test_gather_writes_the_harness_section(monkeypatch, tmp_path):
    monkeypatch.setattr(env_mod, "probe_driver", lambda: {})
    fp = env_mod.gather(run_id="r", report_dir=tmp_path, argv=[], invocation_args=[], sweep="smoke",
                        arch_option=None, xdist_workers=0, known_issues={})
    assert fp["schema"] == "tmac-environment/4"
    assert fp["harness"]["sources_sha256"] == env_mod.sources_digest()


# ---------------------------------------------------------------- the user's environment variables

USER_ENV = {
    "CUDA_HOME": "/usr/local/cuda", "TRITON_CACHE_DIR": "/tmp/t", "XLA_FLAGS": "--xla_dump_to=/d",
    "JAX_PLATFORMS": "cuda", "NCCL_DEBUG": "INFO", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
    "TMA_GPUS": "0,1", "TMAC_KEEP": "1",
    # secrets (a pattern anywhere in the name, any case): recorded as set, never their value
    "CUDA_API_KEY": "k-123", "TRITON_Token": "t-456", "NCCL_SECRET_X": "s-789", "JAX_password": "p-000",
    # not of a prefix: not recorded, secret or not
    "PATH": "/usr/bin", "HOME": "/root", "MY_CUDA_HOME": "/x", "cuda_home": "/y", "TMAX_Y": "1",
    "HF_TOKEN": "hf-secret", "AWS_SECRET_ACCESS_KEY": "aws-secret",
}


def test_run_environment_records_the_prefixes_and_masks_secrets():
    user = env_mod.run_environment(USER_ENV)["user"]
    assert user == {"CUDA_API_KEY": "<set>", "CUDA_HOME": "/usr/local/cuda", "JAX_PLATFORMS": "cuda",
                    "JAX_password": "<set>", "NCCL_DEBUG": "INFO", "NCCL_SECRET_X": "<set>",
                    "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "TMAC_KEEP": "1",
                    "TMA_GPUS": "0,1",
                    "TRITON_CACHE_DIR": "/tmp/t", "TRITON_Token": "<set>", "XLA_FLAGS": "--xla_dump_to=/d"}
    assert list(user) == sorted(user)
    text = json.dumps(env_mod.run_environment(USER_ENV))
    for secret in ("k-123", "t-456", "s-789", "p-000", "hf-secret", "aws-secret"):
        assert secret not in text
    assert env_mod.SECRET_VALUE == "<set>"
    assert all(env_mod.is_secret(n) for n in ("X_TOKEN", "x_key", "SecretName", "DB_PASSWORD"))
    assert not any(env_mod.is_secret(n) for n in ("CUDA_HOME", "XLA_FLAGS", "TMA_GPUS"))


def test_gather_records_the_users_variables_not_the_harness_own(monkeypatch, tmp_path):
    """The variables are the user's as the process started (USER_ENVIRON): one set later (as the
    harness sets CUDA_DEVICE_MAX_CONNECTIONS=1 and TMA_GPUS in the controller) is not recorded
    as theirs; and the fingerprint is valid against its JSON Schema. (USER_ENVIRON itself is
    not patched: this run's own fingerprint may be gathered meanwhile, in its thread.)"""
    monkeypatch.setattr(env_mod, "probe_driver", lambda: {})
    monkeypatch.setenv("TMAC_SELF_TEST_SET_LATER", "1")
    assert "TMAC_SELF_TEST_SET_LATER" not in env_mod.USER_ENVIRON
    fp = env_mod.gather(run_id="r", report_dir=tmp_path, argv=[], invocation_args=[], sweep="smoke",
                        arch_option=None, xdist_workers=0, known_issues={})
    assert fp["environment_variables"] == env_mod.run_environment(env_mod.USER_ENVIRON)
    assert "TMAC_SELF_TEST_SET_LATER" not in fp["environment_variables"]["user"]
    assert schemas.errors("environment.json", fp) == []
    assert schemas.errors("environment.json", dict(fp, environment_variables={"user": {"XLA_FLAGS": 1}}))
    assert schemas.errors("environment.json", dict(fp, environment_variables={"user": {"PATH": "/bin"}}))
    del fp["environment_variables"]
    assert schemas.errors("environment.json", fp)


# ---------------------------------------------------------------- how it is shown

def test_header_line_and_flat_properties():
    h = {"packages": {"numpy": "2.4.6"}, "extras": ["cu13"], "sources_sha256": "ab" * 32,
         "constraints": "constraints/cu13.txt", "git_commit": "0123456789abcdef"}
    fp = {"schema": "tmac-environment/3", "harness": h}
    assert "harness: extra cu13, packages match constraints/cu13.txt, sources abababababab, git 0123456789ab" \
        in fp_mod.essentials(fp)
    flat = fp_mod.flatten(fp)
    assert flat["tmac.harness.sources_sha256"] == "ab" * 32
    assert flat["tmac.harness.constraints"] == "constraints/cu13.txt"
    assert ("harness (sources sha256; packages)", "abababababab; constraints/cu13.txt") in fp_mod.summary_rows(flat)
    h.update(constraints="differs from constraints/cu13.txt: numpy 2.4.6 (pinned 2.5.2)",
             git_commit="unavailable: not a git checkout")
    assert fp_mod.harness_line(fp) == ("extra cu13, packages: differs from constraints/cu13.txt: numpy 2.4.6 "
                                       "(pinned 2.5.2), sources abababababab")


def test_an_older_fingerprint_stays_readable():
    old = {"schema": "tmac-environment/2", "driver": {}, "packages": {}}
    why = "unavailable: not recorded (environment schema 2)"
    assert fp_mod.harness_line(old) == why
    assert "harness: " + why in fp_mod.essentials(old)
    flat = fp_mod.flatten(old)
    assert flat["tmac.harness.sources_sha256"] == why and flat["tmac.harness.constraints"] == why
    assert ("harness (sources sha256; packages)", why) in fp_mod.summary_rows(flat)
    assert flat["tmac.env"] == why and not [k for k in flat if k.startswith("tmac.env.")]
    assert not fp_mod.variables_recorded(flat)
    assert fp_mod.variables_of({"schema": "tmac-environment/3"}) == \
        "unavailable: not recorded (environment schema 3)"


def test_the_variables_as_flat_properties():
    fp = {"schema": "tmac-environment/4",
          "environment_variables": env_mod.run_environment({"XLA_FLAGS": "--a", "NCCL_IB_TOKEN": "t-1"})}
    flat = fp_mod.flatten(fp)
    assert {k: v for k, v in flat.items() if k.startswith("tmac.env")} == {
        "tmac.environment_schema": "tmac-environment/4", "tmac.env": "2 variables recorded",
        "tmac.env.NCCL_IB_TOKEN": "<set>", "tmac.env.XLA_FLAGS": "--a"}
    assert fp_mod.variables_recorded(flat)
    assert fp_mod.variables_recorded(fp_mod.flatten(dict(fp, environment_variables={"user": {}})))
