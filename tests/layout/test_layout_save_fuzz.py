"""Property test of saving a layout into its own file: random valid files (comments everywhere, flags as
`[instance.flags]`, inline and dotted keys, `${VAR}` values) and random edits through the public path.

Every save must load back equal to the layout saved, keep each comment of an untouched part, never write
a value that came from the environment, and a layout that does not validate must leave the file (and
its folder) exactly as they were. Seeds are fixed, so a failure names the seed that reproduces it.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from unittest import mock

import pytest

from vtui.core.model import InstanceSpec, Layout
from vtui.layouts import LayoutError, SaveRefused, load_layout, save_layout
from vtui.layouts.dump import dump_layout, shared_defaults

SECRETS = {
    "VTUI_FZ_KEY": "sk-fz-key-0d1e",
    "VTUI_FZ_KEY2": "sk-fz-key2-77aa",
    "VTUI_FZ_TOKEN": "hf-fz-token-9b2c",
    "VTUI_FZ_MODEL": "org/fz-model-from-env",
}

FLAGS: dict[str, Callable[[random.Random], object]] = {
    "max-num-seqs": lambda r: r.randint(1, 512),
    "block-size": lambda r: r.choice([16, 32]),
    "gpu-memory-utilization": lambda r: r.choice([0.5, 0.85, 0.9, 0.925]),
    "enforce-eager": lambda r: r.random() < 0.5,
    "enable-prefix-caching": lambda r: r.random() < 0.5,
    "seed": lambda r: r.randint(0, 99),
    "max-model-len": lambda r: r.choice([2048, 4096, 8192]),
    "max-num-batched-tokens": lambda r: r.choice([2048, 8192, 16384]),
    "dtype": lambda r: r.choice(["auto", "bfloat16", "half"]),
    "served-model-name": lambda r: [f"m{r.randint(0, 9)}" for _ in range(r.randint(1, 3))],
}
ENV_VALUES: dict[str, Callable[[random.Random], str]] = {
    "HF_TOKEN": lambda r: "${VTUI_FZ_TOKEN}",
    "HF_HUB_OFFLINE": lambda r: r.choice(["0", "1"]),
    "OMP_NUM_THREADS": lambda r: str(r.randint(1, 8)),
}
NOTES = ["", " tuned by hand", " — größe ✓ 日本語", " looks like toml: a = 1 [x]", " \"quoted\" 'too'"]
STYLES = ("table", "inline", "dotted", "empty", "none")


def toml(value: object, rng: random.Random) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(toml(v, rng) for v in value) + "]"
    if isinstance(value, str):
        return f"'{value}'" if rng.random() < 0.3 else json.dumps(value)
    return repr(value)


@dataclass
class Gen:
    """Writes one random layout file and remembers what each comment belongs to."""

    rng: random.Random
    lines: list[str] = field(default_factory=list)
    comments: list[tuple[str, tuple]] = field(default_factory=list)  # (comment, owner)

    def comment(self, owner: tuple) -> str:
        text = f"# c{len(self.comments)};{self.rng.choice(NOTES)}"
        self.comments.append((text, owner))
        return text

    def maybe_lines(self, owner: tuple, p: float = 0.3) -> None:
        while self.rng.random() < p:
            self.lines.append(self.comment(owner))
        if self.rng.random() < 0.2:
            self.lines.append("")

    def kv(self, key: str, value: object, eol_owner: tuple, own_owner: tuple) -> None:
        self.maybe_lines(own_owner, 0.2)
        line = f"{key} = {toml(value, self.rng)}"
        if self.rng.random() < 0.3:
            line += " " * self.rng.randint(1, 3) + self.comment(eol_owner)
        self.lines.append(line)

    def header(self, text: str, owner: tuple) -> None:
        self.maybe_lines(owner, 0.5)
        self.lines.append(text + ("   " + self.comment(owner) if self.rng.random() < 0.3 else ""))

    def sub(
        self, scope: str, table: str, key: str, values: dict[str, object], style: str, owner: tuple
    ) -> None:
        """env/flags of [defaults] (scope "") or an [[instance]] in one of the styles."""
        if style == "inline" and values:
            inline = "{ " + ", ".join(f"{k} = {toml(v, self.rng)}" for k, v in values.items()) + " }"
            line = f"{key} = {inline}"
            if self.rng.random() < 0.4:
                line += "  " + self.comment(("eol", scope, (key,)))
            self.lines.append(line)
        elif style == "dotted":
            for name, value in values.items():
                self.kv(f"{key}.{name}", value, ("eol", scope, (key, name)), owner)
        elif style in ("table", "empty"):
            self.header(f"[{table}.{key}]", owner)
            for name, value in values.items():
                self.kv(name, value, ("eol", scope, (key, name)), owner)


def random_flags(rng: random.Random, most: int) -> dict[str, object]:
    names = rng.sample(sorted(FLAGS), rng.randint(0, most))
    flags = {name: FLAGS[name](rng) for name in names}
    if rng.random() < 0.3:
        flags["api-key"] = rng.choice(["${VTUI_FZ_KEY}", ["${VTUI_FZ_KEY}", "${VTUI_FZ_KEY2}"]])
    return flags


def random_env(rng: random.Random) -> dict[str, str]:
    return {name: make(rng) for name, make in ENV_VALUES.items() if rng.random() < 0.4}


def write_layout(
    rng: random.Random, crlf: bool = False, bom: bool = False
) -> tuple[str, list[tuple[str, tuple]]]:
    g = Gen(rng)
    g.maybe_lines(("file",), 0.7)
    if rng.random() < 0.6:
        g.header("[session]", ("session",))
        g.kv("name", f"fz{rng.randint(0, 99)}", ("session",), ("session",))
        if rng.random() < 0.5:
            g.kv(
                "gpu_hour_price",
                rng.choice([1.5, 2, 3.25]),
                ("eol", "session", ("gpu_hour_price",)),
                ("session",),
            )
    default_model = rng.random() < 0.6
    sub_keys: list[tuple[str, dict, str]] = []
    if default_model or rng.random() < 0.5:
        g.header("[defaults]", ("defaults",))
        if default_model:
            g.kv("model", "${VTUI_FZ_MODEL}", ("defaults",), ("defaults",))
        if rng.random() < 0.4:
            g.kv("max_restarts", rng.randint(0, 9), ("defaults",), ("defaults",))
        if rng.random() < 0.3:
            g.kv("restart", rng.choice(["never", "always"]), ("defaults",), ("defaults",))
        for key, values in (("env", random_env(rng)), ("flags", random_flags(rng, 3))):
            sub_keys.append(
                (key, values, rng.choice(STYLES[:4]) if values else rng.choice(("none", "empty")))
            )
        for key, values, style in sorted(sub_keys, key=lambda s: s[2] in ("table", "empty")):
            g.sub("", "defaults", key, values, style, ("defaults",))
    for i in range(rng.randint(1, 4)):
        name = f"i{i}"
        owner = ("inst", name)
        g.header("[[instance]]", owner)
        g.kv("name", name, owner, owner)
        g.kv("port", 9100 + i, ("eol", name, ("port",)), owner)
        if not default_model or rng.random() < 0.2:
            g.kv("model", rng.choice(["org/a", "org/b", "${VTUI_FZ_MODEL}"]), owner, owner)
        if rng.random() < 0.5:
            g.kv("gpus", [i], ("eol", name, ("gpus",)), owner)
        if rng.random() < 0.3:
            g.kv("max_restarts", rng.randint(0, 9), ("eol", name, ("max_restarts",)), owner)
        if rng.random() < 0.3:
            g.kv("start_stagger", rng.choice([0, 1.5, 3]), ("eol", name, ("start_stagger",)), owner)
        subs = [("env", random_env(rng)), ("flags", random_flags(rng, 4))]
        rng.shuffle(subs)
        chosen = [
            (key, values, rng.choice(STYLES) if values else rng.choice(("none", "empty")))
            for key, values in subs
        ]
        for key, values, style in sorted(chosen, key=lambda s: s[2] in ("table", "empty")):
            g.sub(name, "instance", key, values, style, owner)
        g.maybe_lines(owner, 0.3)
    g.maybe_lines(("file",), 0.5)
    text = "\n".join(g.lines) + "\n"
    if crlf:
        text = text.replace("\n", "\r\n")
    return ("\ufeff" if bom else "") + text, g.comments


# -- edits --------------------------------------------------------------------------------------


def edit_instance(rng: random.Random, layout: Layout, spec: InstanceSpec) -> Layout:
    roll = rng.random()
    if roll < 0.35:
        name = rng.choice(sorted(FLAGS))
        new = spec.with_flags({name: FLAGS[name](rng)})
    elif roll < 0.6 and spec.flags:
        new = spec.with_flags(unset=[rng.choice(sorted(spec.flags))])
    elif roll < 0.65:
        new = spec.with_flags(unset=list(spec.flags))  # every flag, the last one included
    elif roll < 0.75:
        env = dict(spec.env)
        name = rng.choice(sorted(ENV_VALUES))
        if name in env and rng.random() < 0.5:
            del env[name]
        else:
            env[name] = ENV_VALUES[name](rng) if name != "HF_TOKEN" else "typed-in-token"
        new = replace(spec, env=env)
    elif roll < 0.85:
        new = replace(
            spec,
            restart=replace(
                spec.restart,
                max_restarts=rng.randint(0, 9),
                mode=rng.choice(["never", "on-failure", "always"]),
            ),
        )
    elif roll < 0.9:
        new = replace(spec, start_stagger=rng.choice([0.0, 2.0]))
    elif roll < 0.95:
        new = replace(spec, model=rng.choice(["org/a", "org/c"]))
    else:
        new = replace(spec, gpus=())
    return layout.replace_instance(new)


def random_edit(rng: random.Random, layout: Layout) -> Layout:
    roll = rng.random()
    if roll < 0.1 and len(layout.instances) > 1:
        gone = rng.choice(layout.names())
        return replace(layout, instances=tuple(s for s in layout.instances if s.name != gone))
    if roll < 0.2:
        base = rng.choice(layout.instances)  # a copy of one, its secrets included
        port = max(s.port for s in layout.instances) + 1
        extra = replace(base, name=f"n{port}", port=port, gpus=())
        return replace(layout, instances=(*layout.instances, extra))
    if roll < 0.25:
        return replace(layout, session=replace(layout.session, gpu_hour_price=rng.choice([None, 4.0])))
    for _ in range(rng.randint(1, 3)):
        layout = edit_instance(rng, layout, rng.choice(layout.instances))
    return layout


def invalid_edit(rng: random.Random, layout: Layout) -> Layout:
    spec = rng.choice(layout.instances)
    bad = rng.choice(
        [
            lambda: spec.with_flags({"max-num-seqs": "many"}),
            lambda: spec.with_flags({"gpu-memory-utilization": 5.0}),
            lambda: spec.with_flags({"no-such-flag": 1}),
            lambda: spec.with_flags({"sim-speed": 2.0}),  # a sim flag on a vllm instance
            lambda: replace(spec, restart=replace(spec.restart, backoff_initial=10.0, backoff_max=1.0)),
            lambda: replace(spec, port=0),
            lambda: replace(spec, env={**spec.env, "N": 3}),  # type: ignore[dict-item]
        ]
    )()
    if rng.random() < 0.3 and len(layout.instances) > 1:
        other = next(s for s in layout.instances if s.name != spec.name)
        bad = replace(spec, port=other.port)
    return layout.replace_instance(bad)


# -- checks -------------------------------------------------------------------------------------


def may_lose(owner: tuple, old: Layout, new: Layout) -> bool:
    """Whether the edit from `old` to `new` may take away a comment that belongs to `owner`."""
    if owner[0] == "inst":
        return owner[1] not in new.names()
    if owner[0] != "eol":
        return False
    scope, path = owner[1], owner[2]
    if scope == "session":
        return getattr(new.session, path[0]) is None
    if scope == "":
        kept = shared_defaults(new)
        return len(path) == 2 and path[1] not in dict(kept.get(path[0]) or {})  # type: ignore[call-overload]
    if scope not in new.names():
        return True
    return len(path) == 2 and path[1] not in getattr(new.instance(scope), path[0])


def same(a: Layout, b: Layout) -> bool:
    return (a.session, a.instances) == (b.session, b.instances)


def check_save(path: Path, edited: Layout, comments: list[tuple[str, tuple]], in_place: bool) -> str:
    before = load_layout(path)
    with mock.patch("vtui.layouts.files.dump_layout", wraps=dump_layout) as full_rewrite:
        save_layout(edited)
    assert full_rewrite.called is not in_place, "saved in place" if in_place else "fell back"
    text = path.read_bytes().decode("utf-8")
    assert same(load_layout(path), edited)  # (a)
    for secret in SECRETS.values():  # (c): what came from the environment goes back as ${VAR}
        assert secret not in text
    lost = [c for c, owner in comments if c not in text and not may_lose(owner, before, edited)]
    assert lost == []  # (b)
    kept = [text.find(c) for c, _ in comments if c in text]
    assert kept == sorted(kept), "comments kept their order"
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]
    return text


def check_refused(path: Path, bad: Layout) -> None:
    before = path.read_bytes()
    with pytest.raises(LayoutError) as caught:
        save_layout(bad)
    assert str(caught.value).startswith(f"{path} (not saved):")
    assert path.read_bytes() == before  # (d)
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


@pytest.fixture
def secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)


def fuzz(tmp_path: Path, seed: int, crlf: bool = False, bom: bool = False, rounds: int = 6) -> None:
    rng = random.Random(seed)
    folder = tmp_path / f"s{seed}"
    folder.mkdir()
    path = folder / "layout.toml"
    text, comments = write_layout(rng, crlf=crlf, bom=bom)
    path.write_bytes(text.encode("utf-8"))
    for _ in range(rounds):
        layout = load_layout(path)
        if rng.random() < 0.25:
            check_refused(path, invalid_edit(rng, layout))
        edited = random_edit(rng, layout)
        if rng.random() < 0.05 and len(edited.instances) > 1:
            check_set_aside(path, replace(edited, instances=tuple(reversed(edited.instances))))
        text = check_save(path, edited, comments, in_place=True)
        comments = [(c, owner) for c, owner in comments if c in text]  # those lost as allowed stay lost
        if crlf:
            assert "\n" not in text.replace("\r\n", ""), "CRLF kept"
        if bom:
            assert text.startswith("\ufeff") and text.count("\ufeff") == 1


def check_set_aside(path: Path, reordered: Layout) -> None:
    """Reordered instances cannot be saved in place: the file stays as it is, the whole layout goes to
    PATH.new (which must round-trip and keep secrets out), and the error says both."""
    before = path.read_bytes()
    with pytest.raises(SaveRefused) as caught:
        save_layout(reordered)
    aside = path.with_name(path.name + ".new")
    assert path.read_bytes() == before
    assert (
        str(path) in str(caught.value)
        and "reordered" in str(caught.value)
        and str(aside) in str(caught.value)
    )
    text = aside.read_text(encoding="utf-8")
    assert same(load_layout(aside), reordered)
    for secret in SECRETS.values():
        assert secret not in text
    aside.unlink()


SEEDS = int(os.environ.get("VTUI_FUZZ_SEEDS", "16"))  # more for a longer hunt: VTUI_FUZZ_SEEDS=1000


def test_random_layouts_and_edits_save_in_place(tmp_path: Path, secrets: None) -> None:
    for seed in range(SEEDS):
        fuzz(tmp_path, seed)


def test_crlf_files_keep_their_line_endings(tmp_path: Path, secrets: None) -> None:
    for seed in range(1000, 1000 + max(1, SEEDS // 4)):
        fuzz(tmp_path, seed, crlf=True)


def test_files_with_a_bom_and_non_ascii_comments_load_and_save(tmp_path: Path, secrets: None) -> None:
    for seed in range(2000, 2000 + max(1, SEEDS // 4)):
        fuzz(tmp_path, seed, bom=True)


# -- the cases above, one by one (each was a bug or is a promise worth naming) ---------------------

THREE = """\
# three instances
[defaults]
model = "org/m"
flags.max-num-seqs = 30
flags.enforce-eager = false   # eager: no CUDA graphs
# shared, keep this note
flags.seed = 1

[[instance]]
name = "a"
port = 9001
flags = { block-size = 16 }   # inline

# --- b: the dotted one ---
[[instance]]
name = "b"
port = 9002
flags.block-size = 32   # dotted

# --- c: the table one ---
[[instance]]
name = "c"   # größe ✓ 日本語
port = 9003
[instance.flags]
block-size = 16   # table
# --- end of file: keep me ---
"""


def saved_in_place(path: Path, layout: Layout) -> str:
    with mock.patch("vtui.layouts.files.dump_layout", wraps=dump_layout) as full_rewrite:
        save_layout(layout)
    assert not full_rewrite.called
    assert same(load_layout(path), layout)
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]
    return path.read_bytes().decode("utf-8")


@pytest.fixture
def three(tmp_path: Path, secrets: None) -> Path:
    path = tmp_path / "three.toml"
    path.write_text(THREE, encoding="utf-8")
    return path


def test_removing_an_instance_keeps_the_comments_that_lead_into_the_next_one(three: Path) -> None:
    layout = load_layout(three)
    text = saved_in_place(three, replace(layout, instances=layout.instances[1:]))  # was: lost "# --- b"
    assert '# --- b: the dotted one ---\n[[instance]]\nname = "b"' in text and 'name = "a"' not in text
    layout = load_layout(three)
    text = saved_in_place(
        three, replace(layout, instances=layout.instances[:1])
    )  # the file's last lines stay
    assert text.endswith("# --- end of file: keep me ---\n") and 'name = "c"' not in text


@pytest.mark.parametrize("name", ["a", "b", "c"])  # inline, dotted, [instance.flags]
def test_removing_an_instances_last_own_flag_in_each_style(three: Path, name: str) -> None:
    layout = load_layout(three)
    text = saved_in_place(
        three, layout.replace_instance(layout.instance(name).with_flags(unset=["block-size"]))
    )
    assert text.count("block-size") == 2
    for line in THREE.splitlines():
        if "block-size" not in line and (line.startswith(("#", "flags.", "[")) or "name =" in line):
            assert line in text


def test_dropping_dotted_default_flags_split_by_a_comment_stays_in_place(three: Path) -> None:
    """Was: tomlkit's view of `flags.x` keys split by a comment went stale after one delete, the edit
    raised and the save fell back to the full rewrite, losing every comment."""
    layout = load_layout(three)
    text = saved_in_place(
        three,
        layout.replace_instance(layout.instance("a").with_flags(unset=["max-num-seqs", "enforce-eager"])),
    )
    assert "# shared, keep this note" in text and "# --- end of file: keep me ---" in text
    assert load_layout(three).instance("b").flags["max-num-seqs"] == 30
    assert "flags.seed = 1" in text


def test_a_flags_table_added_to_an_instance_goes_above_the_next_ones_heading_comment(three: Path) -> None:
    """Was: the new [instance.flags] went below the comment and blank line that lead into instance b."""
    three.write_text(THREE.replace("flags = { block-size = 16 }   # inline\n", ""), encoding="utf-8")
    layout = load_layout(three)
    text = saved_in_place(three, layout.replace_instance(layout.instance("a").with_flags({"block-size": 32})))
    assert "port = 9001\n\n[instance.flags]\nblock-size = 32\n\n# --- b: the dotted one ---\n" in text


def test_an_empty_flags_table_gets_the_new_flag_under_its_header(tmp_path: Path, secrets: None) -> None:
    path = tmp_path / "empty.toml"
    path.write_text(
        '[[instance]]\nname = "a"\nmodel = "m"\nport = 9001\n[instance.flags]\n'
        '# --- b ---\n[[instance]]\nname = "b"\nmodel = "m"\nport = 9002\n',
        encoding="utf-8",
    )
    layout = load_layout(path)
    text = saved_in_place(path, layout.replace_instance(layout.instance("a").with_flags({"seed": 3})))
    assert "[instance.flags]\nseed = 3\n# --- b ---\n[[instance]]" in text


def test_secrets_moved_or_copied_to_another_instance_are_written_as_references(
    tmp_path: Path, secrets: None
) -> None:
    """Was: a `${VAR}` value taken from [defaults] into an instance, or copied into an added instance,
    was written as the secret itself."""
    path = tmp_path / "keys.toml"
    path.write_text(
        '[defaults]\nmodel = "m"\nflags.api-key = "${VTUI_FZ_KEY}"\n\n'
        '[[instance]]\nname = "a"\nport = 9001\nenv = { HF_TOKEN = "${VTUI_FZ_TOKEN}" }\n\n'
        '[[instance]]\nname = "b"\nport = 9002\n',
        encoding="utf-8",
    )
    layout = load_layout(path)
    text = saved_in_place(path, layout.replace_instance(layout.instance("b").with_flags(unset=["api-key"])))
    assert 'api-key = "${VTUI_FZ_KEY}"' in text
    layout = load_layout(path)
    copy = replace(layout.instance("a"), name="a2", port=9003)
    text = saved_in_place(path, replace(layout, instances=(*layout.instances, copy)))
    assert text.count('"${VTUI_FZ_TOKEN}"') == 2 and text.count('"${VTUI_FZ_KEY}"') == 2
    assert not any(secret in text for secret in SECRETS.values())


def test_crlf_line_endings_stay_crlf(tmp_path: Path, secrets: None) -> None:
    """Was: the file was read with newline translation, so one changed flag turned every line end LF."""
    path = tmp_path / "crlf.toml"
    path.write_bytes(THREE.replace("\n", "\r\n").encode("utf-8"))
    layout = load_layout(path)
    extra = replace(layout.instance("c"), name="d", port=9004)
    edited = replace(layout, instances=(*layout.instances[1:], extra))
    edited = edited.replace_instance(edited.instance("b").with_flags({"max-num-seqs": 64}))
    text = saved_in_place(path, edited)
    assert "\n" not in text.replace("\r\n", "") and "# --- end of file: keep me ---\r\n" in text


def test_a_bom_file_loads_and_keeps_its_bom_and_non_ascii_comments(tmp_path: Path, secrets: None) -> None:
    """Was: a UTF-8 byte order mark (Notepad) made the layout a syntax error at line 1."""
    path = tmp_path / "bom.toml"
    path.write_bytes(("\ufeff" + THREE).encode("utf-8"))
    layout = load_layout(path)
    text = saved_in_place(path, layout.replace_instance(layout.instance("c").with_flags({"seed": 9})))
    assert text.startswith("\ufeff# three instances\n") and 'name = "c"   # größe ✓ 日本語' in text
