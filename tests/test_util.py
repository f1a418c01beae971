import pytest

from edgetune.errors import UsageError
from edgetune.util import parse_input_shapes


def test_parse_input_shapes():
    assert parse_input_shapes(["x=1,3,224,224", "gpu_0/data_0=1x3x8x8"]) == {"x": (1, 3, 224, 224), "gpu_0/data_0": (1, 3, 8, 8)}
    assert parse_input_shapes(["a=b=2,2"]) == {"a=b": (2, 2)}  # the last '=' separates


@pytest.mark.parametrize("bad", ["x", "x=", "=1,2", "x=1,,2", "x=1,a", "x=0,3", "x=-1,3"])
def test_malformed_input_shape(bad):
    with pytest.raises(UsageError, match="malformed --input-shape"):
        parse_input_shapes([bad])
