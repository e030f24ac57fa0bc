"""`graphattn download NAME ... --root DIR`: named datasets fetched from their canonical URLs (here a
stand-in server giving the real file) and checked; a copy already there is checked and kept."""
import io
import urllib.request


from graphattn.cli.main import main
from graphattn.data.moleculenet import MOLECULENET
from graphattn.testing import requires_data, shared_data_dir


class _Response(io.BytesIO):
    def __init__(self, body: bytes):
        super().__init__(body)
        self.headers = {"Content-Length": str(len(body))}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@requires_data("esol")
def test_download_fetches_checks_and_names_the_folder(tmp_path, monkeypatch, capsys):
    src = next((shared_data_dir() / "esol").glob("*.csv"))
    urls = []

    def serve(req, timeout=None):
        urls.append(getattr(req, "full_url", req))
        return _Response(src.read_bytes())

    monkeypatch.setattr(urllib.request, "urlopen", serve)
    root = tmp_path / "data"
    assert main(["download", "esol", "karate", "--root", str(root)]) == 0
    out = capsys.readouterr().out
    assert urls == [MOLECULENET["esol"].url]
    got = list((root / "esol").glob("*.csv"))
    assert len(got) == 1 and got[0].read_bytes() == src.read_bytes()
    assert "karate: built in" in out and f"GRAPHATTN_DATA={root.resolve()}" in out
    assert main(["download", "esol", "--root", str(root)]) == 0  # already there: checked, not fetched again
    assert len(urls) == 1


def test_a_broken_download_is_one_line_and_the_exit_status_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(urllib.request, "urlopen", lambda req, timeout=None: _Response(b"not,a,dataset\n1,2,3\n"))
    assert main(["download", "bbbp", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1].startswith("graphattn download: bbbp: ") and "Traceback" not in err
    assert not list(tmp_path.rglob("*.csv"))  # a file that fails its check is not kept


def test_an_unknown_name_is_refused_before_anything_is_fetched(capsys):
    assert main(["download", "tox21", "corra"]) == 2
    assert "unknown dataset 'corra' (did you mean cora?)" in capsys.readouterr().err
