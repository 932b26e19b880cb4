"""The command-line options: documented in --help, bad values met with a clear error."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def pytest_run(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_help_documents_every_option(tmp_path):
    """``--help`` and ``--markers`` name the harness's options and markers; they run no
    case and make no report folder (``--markers`` left an empty reports/out/<run id> in
    the checkout: fixtures.plugins.reporting.run_reports), here --report-dir's."""
    out_dir = tmp_path / "out"
    out = pytest_run("--help", f"--report-dir={out_dir}").stdout
    for opt in ("--sweep", "--report-dir", "--kernel-cache", "--arch"):
        assert opt in out, f"{opt} missing from pytest --help"
    markers = pytest_run("--markers", f"--report-dir={out_dir}").stdout
    for marker in ("gpu", "multi_gpu", "isolated"):
        assert f"@pytest.mark.{marker}" in markers, f"{marker} missing from pytest --markers"
    assert not out_dir.exists(), sorted(p.name for p in out_dir.iterdir())


@pytest.mark.parametrize("what", ["--fixtures", "--fixtures-per-test", "--markers", "--collect-only",
                                  "--version", "--help"])
def test_an_answer_without_cases_writes_no_run_folder(tmp_path, what):
    """pytest answering without running a case writes no run folder and moves no
    ``latest`` in the default place (a tree's ``reports/out``): ``--fixtures`` wrote a whole
    report there, verdict INCOMPLETE, and moved ``latest`` to it."""
    from nested_run import make_tree, pytest_run as run
    root = make_tree(tmp_path / "t", "def test_ok():\n    pass\n")
    cp = run(root, what)
    assert cp.returncode == 0, cp.stdout[-2000:] + cp.stderr[-2000:]
    assert "verdict:" not in cp.stdout, cp.stdout[-2000:]
    assert not (root / "reports").exists(), sorted(p.name for p in (root / "reports").rglob("*"))


@pytest.mark.parametrize("args,msg", [(["--arch", "sm90"], "--arch: not an NVRTC architecture"),
                                      (["--sweep", "huge"], "invalid choice")])
def test_bad_options_are_usage_errors(args, msg):
    r = pytest_run(*args, "--collect-only", "-q")
    assert r.returncode == 4, r.stdout + r.stderr
    assert msg in r.stderr


def _file(tmp_path) -> str:
    f = tmp_path / "a-file"
    f.write_text("x")
    return str(f)


# Each bad input of a run: (arguments, environment, start of the one error line).
SETUP_FAULTS = {
    "arch-below-sm90": (["--arch=sm_80"], {}, "ERROR: --arch: sm_80 has no tensor maps"),
    "arch-not-arch-specific": (["--arch=sm_90"], {}, "ERROR: --arch: sm_90 is not a target of tensormap.replace"),
    "arch-unknown": (["--arch=sm_999a"], {}, "ERROR: --arch: sm_999a is not a target of tensormap.replace"),
    "kernel-cache-file": (["--kernel-cache={file}"], {}, "ERROR: --kernel-cache: {file} exists and is not a folder"),
    "kernel-cache-unwritable": (["--kernel-cache={file}/sub"], {}, "ERROR: --kernel-cache: {file}/sub is not a writable folder"),
    "kernel-cache-env": ([], {"TMA_KERNEL_CACHE": "{file}"}, "ERROR: $TMA_KERNEL_CACHE: {file} exists and is not a folder"),
    "cccl-include": ([], {"TMA_CCCL_INCLUDE": "{tmp}"}, "ERROR: TMA_CCCL_INCLUDE={tmp} holds no cuda/ptx header"),
    "report-dir-file": (["--report-dir={file}"], {}, "ERROR: --report-dir: {file} exists and is not a folder"),
    "report-dir-unwritable": (["--report-dir={file}/sub"], {}, "ERROR: --report-dir: {file}/sub is not a writable folder"),
    "require-gpus": (["--require-gpus=two"], {}, "ERROR: --require-gpus='two': expected a number of GPUs"),
    "require-gpus-env": ([], {"TMA_REQUIRE_GPUS": "-1"}, "ERROR: TMA_REQUIRE_GPUS='-1': expected a number of GPUs"),
    "run-timeout": (["--run-timeout=soon"], {}, "ERROR: --run-timeout='soon': expected seconds"),
    "run-timeout-nan": (["--run-timeout=nan"], {}, "ERROR: --run-timeout='nan': expected seconds"),
    # the GPUs' syntax is checked on any machine, a GPU or none (a fleet script's typo)
    "gpus": (["--gpus=abc"], {}, "ERROR: --gpus=abc: 'abc' is not a GPU ordinal"),
    "gpus-range": (["--gpus=3-1"], {}, "ERROR: --gpus=3-1: '3-1' is not a GPU ordinal"),
    "gpus-env": ([], {"TMA_GPUS": "0,,1"}, "ERROR: TMA_GPUS=0,,1: '' is not a GPU ordinal"),
    # an experiment of the GPU service's asked for without the service
    "one-trap-no-service": (["--traps-one-at-a-time", "--gpu-service=off"], {},
                            "ERROR: --traps-one-at-a-time: it holds the GPU service's calls"),
    "one-trap-no-lane": (["--traps-one-at-a-time", "--trap-lane=off"], {},
                         "ERROR: --traps-one-at-a-time: it holds the GPU service's calls"),
    "service-children-no-service": (["--gpu-service-children=2", "--gpu-service=off"], {},
                                    "ERROR: --gpu-service-children: it sets the GPU service's children"),
    "service-children-zero": (["--gpu-service-children=0"], {},
                              "ERROR: --gpu-service-children='0': expected a number of children"),
    "service-children-word": (["--gpu-service-children=many"], {},
                              "ERROR: --gpu-service-children='many': expected a number of children"),
}


@pytest.mark.parametrize("args,env,line", SETUP_FAULTS.values(), ids=SETUP_FAULTS.keys())
def test_setup_faults_are_one_line_and_exit_4(tmp_path, args, env, line):
    """A bad option or environment is checked at start-up: pytest's usage exit status,
    one line naming the input and the reason, no traceback, no case run."""
    from nested_run import make_tree, pytest_run as run
    subs = {"file": _file(tmp_path), "tmp": str(tmp_path)}
    root = make_tree(tmp_path / "t", "def test_ok():\n    pass\n")
    cp = run(root, *[a.format(**subs) for a in args], "-n", "2",
             env={k: v.format(**subs) for k, v in env.items()})
    assert cp.returncode == 4, cp.stdout + cp.stderr
    errors = [ln for ln in cp.stderr.splitlines() if ln.startswith("ERROR:")]
    assert errors == [errors[0]] and errors[0].startswith(line.format(**subs)), cp.stderr
    assert "Traceback" not in cp.stdout + cp.stderr and "passed" not in cp.stdout


def test_unknown_marker_is_an_error(tmp_path):
    t = tmp_path / "test_x.py"
    t.write_text("import pytest\n@pytest.mark.gpuu\ndef test_a():\n    pass\n")
    r = pytest_run(str(t), "-c", str(ROOT / "tox.ini"), "--rootdir", str(ROOT))
    assert r.returncode != 0 and "gpuu" in (r.stdout + r.stderr)


def test_the_service_has_the_children_asked_else_one_per_worker_up_to_a_cap():
    """``--gpu-service-children N``: the GPU service's children for the batches, per GPU;
    unset, one per worker of the run, at most ``GENERAL_MAX`` whatever ``-n``."""
    from fixtures.cuda_layer.gpu_service import GENERAL_MAX
    from types import SimpleNamespace
    from fixtures.plugins.run_control import lane_control

    def config(children, n):
        opts = {"gpu_service_children": children}
        return SimpleNamespace(getoption=lambda name, default=None: opts.get(name, default),
                               option=SimpleNamespace(tx=None, numprocesses=n))
    assert lane_control.service_children(config("3", 8)) == 3
    assert lane_control.service_children(config(None, 8)) is None
    assert GENERAL_MAX == 8
    assert [lane_control.children(config(None, n)) for n in (1, 4, 8, 12, 32)] == [1, 4, 8, 8, 8]
    assert lane_control.children(config("12", 32)) == 12 and lane_control.children(config("2", 8)) == 2
    with pytest.raises(ValueError, match="expected a number of children"):
        lane_control.service_children(config("-1", 8))

