"""repr, IPython's pretty printer and treescope show field names and mark static fields."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

import staticfield as sf

pretty = pytest.importorskip("IPython.lib.pretty")
formatters = pytest.importorskip("IPython.core.formatters")
treescope = pytest.importorskip("treescope")


@sf.dataclass
class Layer:
    w: jax.Array
    b: jax.Array
    act: sf.Static[str] = "tanh"
    sizes: tuple = sf.static(default=(2, 3))


@sf.dataclass
class Net:
    layers: tuple
    extra: dict
    name: sf.Static[str] = "net"


@sf.dataclass
class Point:
    x: jax.Array
    y: float


@sf.dataclass
class Quiet:
    w: jax.Array
    secret: str = sf.static(default="hidden", repr=False)


def _layer() -> Layer:
    return Layer(jnp.ones((2, 3)), jnp.zeros(3))


LAYER_TEXT = """\
Layer(
  w=f32[2,3],
  b=f32[3],
  act='tanh',  # static
  sizes=(2, 3),  # static
)"""


def test_repr_names_fields_and_summarises_arrays():
    """repr is one line with field names, arrays as dtype[shape] and static values as their repr."""
    assert repr(_layer()) == "Layer(w=f32[2,3], b=f32[3], act='tanh', sizes=(2, 3))"


def test_ipython_pretty_marks_static_fields():
    """IPython's pretty printer puts one field per line and marks each static field."""
    assert pretty.pretty(_layer()) == LAYER_TEXT


def test_ipython_display_formatter_uses_the_hook():
    """The plain-text formatter a notebook or the IPython shell uses shows the same text."""
    assert formatters.PlainTextFormatter()(_layer()) == LAYER_TEXT


def test_ipython_pretty_nests_instances_in_containers():
    """Nested instances inside tuples and dicts keep their layout and static marks."""
    net = Net((_layer(),), {"step": jnp.int32(1)})
    assert pretty.pretty(net) == (
        "Net(\n"
        "  layers=(Layer(\n"
        "     w=f32[2,3],\n"
        "     b=f32[3],\n"
        "     act='tanh',  # static\n"
        "     sizes=(2, 3),  # static\n"
        "   ),),\n"
        "  extra={'step': i32[](1)},\n"
        "  name='net',  # static\n"
        ")"
    )


def test_ipython_pretty_without_static_fields_fits_one_line():
    """A class with no static fields prints like its repr when it fits, and wraps when it does not."""
    assert pretty.pretty(Point(jnp.ones(2), 1.0)) == "Point(x=f32[2], y=1.0)"
    wrapped = pretty.pretty(Point(jnp.ones(2), 1.0), max_width=12)
    assert wrapped == "Point(x=f32[2],\n      y=1.0)"


def test_ipython_pretty_respects_repr_false():
    """A field declared with repr=False is hidden, as in repr."""
    text = pretty.pretty(Quiet(jnp.ones(1)))
    assert "secret" not in text and "w=f32[1]" in text


def test_treescope_text_marks_static_fields():
    """treescope's text rendering names every field and marks the static ones."""
    text = treescope.render_to_text(Net((_layer(),), {"step": jnp.int32(1)}))
    assert "layers=(" in text and "extra={" in text
    assert "act='tanh',  # static" in text
    assert "sizes=(2, 3),  # static" in text
    assert "name='net',  # static" in text
    assert "float32(2, 3)" in text.split("w=")[1].split("b=")[0]  # arrays keep treescope's summary
    assert "# static" not in text.split("act=")[0]  # dynamic fields carry no mark


def test_treescope_html_marks_static_fields():
    """treescope's HTML rendering (what a notebook shows) contains the field names and the static marks."""
    html = treescope.render_to_html(_layer(), compressed=False)
    for name in ("w=", "b=", "act=", "sizes=", "# static"):
        assert name in html


def test_treescope_renders_without_error_even_without_hooks():
    """treescope renders an instance and names its fields whether or not the hooks are present."""
    text = treescope.render_to_text(_layer())
    for name in ("w=", "b=", "act=", "sizes="):
        assert name in text


def test_a_class_with_its_own_repr_keeps_it_in_ipython():
    """A class that writes its own __repr__ is shown with it by IPython too, not with the field layout."""

    @sf.dataclass
    class Custom:
        w: jax.Array
        n: sf.Static[int] = 1

        def __repr__(self):
            return "Custom<mine>"

    assert pretty.pretty(Custom(jnp.ones(2))) == "Custom<mine>"
