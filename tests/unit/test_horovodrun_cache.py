"""horovodrun's Gloo build check, answered once per installation (xover/run/external/horovodrun_main.py): what is
kept, when it is asked again, and that a cache which cannot be kept changes no answer."""

import json

from xover.run.external import horovodrun_main as horovodrun


class Check:
    """horovod's gloo_built, counted."""

    def __init__(self, answer):
        self.answer, self.calls = answer, 0

    def __call__(self, verbose=False):
        self.calls += 1
        return self.answer


def test_a_true_answer_is_kept_and_asked_again_only_when_the_installation_changes(tmp_path, monkeypatch):
    key = ["python", ["torch", ["torch/__init__.py", 1, 2], [["mpi_lib.so", 3, 4]]]]
    monkeypatch.setattr(horovodrun, "installation_key", lambda extensions: key)
    check, path = Check(True), tmp_path / "cache" / horovodrun.CACHE_NAME
    gloo_built = horovodrun.cached_check(check, ["torch"], path)
    assert [gloo_built(), gloo_built(), gloo_built()] == [True] * 3 and check.calls == 1
    assert json.loads(path.read_text()) == {"installations": [key]}
    assert (path.stat().st_mode & 0o777) == 0o600
    before = json.loads(json.dumps(key))
    key[1][2][0][2] = 5  # Horovod rebuilt: its library's modification time changed
    assert gloo_built() is True and check.calls == 2
    assert json.loads(path.read_text()) == {"installations": [key, before]}  # another venv keeps its own


def test_the_newest_installations_are_kept(tmp_path, monkeypatch):
    path, check = tmp_path / horovodrun.CACHE_NAME, Check(True)
    for number in range(horovodrun.KEPT_INSTALLATIONS + 2):
        monkeypatch.setattr(horovodrun, "installation_key", lambda extensions, number=number: [f"python{number}"])
        horovodrun.cached_check(check, ["torch"], path)()
    kept = json.loads(path.read_text())["installations"]
    assert len(kept) == horovodrun.KEPT_INSTALLATIONS and kept[0] == [f"python{horovodrun.KEPT_INSTALLATIONS + 1}"]


def test_other_answers_are_never_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(horovodrun, "installation_key", lambda extensions: ["python"])
    path = tmp_path / horovodrun.CACHE_NAME
    for answer in (False, None):
        check = Check(answer)
        gloo_built = horovodrun.cached_check(check, ["torch"], path)
        assert [gloo_built(), gloo_built()] == [answer, answer] and check.calls == 2
        assert not path.exists()


def test_a_cache_that_cannot_be_written_or_read_only_costs_the_check(tmp_path, monkeypatch):
    monkeypatch.setattr(horovodrun, "installation_key", lambda extensions: ["python"])
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    check = Check(True)
    gloo_built = horovodrun.cached_check(check, ["torch"], blocked / horovodrun.CACHE_NAME)
    assert [gloo_built(), gloo_built()] == [True, True] and check.calls == 2
    garbled = tmp_path / horovodrun.CACHE_NAME
    for text in ("{not json", "[1, 2]", '{"installations": "python"}'):
        garbled.write_text(text)
        check = Check(True)
        assert horovodrun.cached_check(check, ["torch"], garbled)() is True and check.calls == 1
        assert json.loads(garbled.read_text()) == {"installations": [["python"]]}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", horovodrun.CACHE_NAME]  # no temporary left


def test_the_key_names_the_files_the_check_loads_without_importing_them(tmp_path, monkeypatch):
    package = tmp_path / "fakehorovod" / "fakeframework"
    package.mkdir(parents=True)
    (tmp_path / "fakehorovod" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("raise RuntimeError('imported')")
    (package / "mpi_lib.cpython-311-x86_64-linux-gnu.so").write_bytes(b"x" * 7)
    (tmp_path / "fakeframework.py").write_text("raise RuntimeError('imported')")
    monkeypatch.syspath_prepend(str(tmp_path))
    [python, [name, framework, libraries], [missing, nothing, none]] = horovodrun.installation_key(
        ["fakeframework", "nosuchframework"], package="fakehorovod")
    assert name == "fakeframework" and framework[0] == str(tmp_path / "fakeframework.py")
    assert [(lib[0].rsplit("/", 1)[1], lib[1]) for lib in libraries] == [("mpi_lib.cpython-311-x86_64-linux-gnu.so", 7)]
    assert (missing, nothing, none) == ("nosuchframework", None, [])
