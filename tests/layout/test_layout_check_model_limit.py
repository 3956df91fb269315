"""`vtui check` warns when max-model-len is past the model's own limit (its config.json on disk), the
start vLLM would refuse; a limit it cannot read, or an allowed override, is no warning."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

from vtui.cli import main


def checked(tmp_path: Path, flags: str, env: str = "") -> tuple[int, str]:
    model = tmp_path / "tiny-model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "hidden_size": 64,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "num_hidden_layers": 2,
                "max_position_embeddings": 2048,
                "vocab_size": 1000,
                "torch_dtype": "float16",
            }
        )
    )
    path = tmp_path / "layout.toml"
    path.write_text(
        f'[[instance]]\nname = "a"\nmodel = "{model}"\nport = 8011\n{env}[instance.flags]\n{flags}\n'
    )
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["check", str(path)])
    return code, out.getvalue()


def test_a_max_model_len_past_the_models_limit_is_warned(tmp_path: Path) -> None:
    code, text = checked(tmp_path, 'max-model-len = "4K"')
    assert code == 0
    assert "warning: a: max-model-len 4096 > the model's limit 2048: vLLM refuses to start" in text
    assert str(tmp_path / "tiny-model" / "config.json") in text and "1 warning(s)" in text


def test_within_the_limit_or_allowed_is_no_warning(tmp_path: Path) -> None:
    assert "model's limit" not in checked(tmp_path, "max-model-len = 2048")[1]
    allowed = checked(tmp_path, "max-model-len = 4096", 'env.VLLM_ALLOW_LONG_MAX_MODEL_LEN = "1"\n')[1]
    assert "model's limit" not in allowed and "OK" in allowed
