"""pyproject.toml's pytest ``filterwarnings``: a DeprecationWarning or FutureWarning attributed to
a fedsim module (fedsim calling an API that is going away) fails the test that meets it; one
attributed to another library's own code stays a warning in the summary."""

from __future__ import annotations

import pytest


def _warner(module: str, category: type[Warning]):
    """A function of module ``module`` that warns ``category`` from its own line."""
    scope = {"__name__": module}
    exec("import warnings\n"
         "def f(category):\n"
         "    warnings.warn('an API that is going away', category, stacklevel=1)\n", scope)
    return lambda: scope["f"](category)


@pytest.mark.parametrize("category", [DeprecationWarning, FutureWarning])
@pytest.mark.parametrize("module", ["fedsim", "fedsim.kernel.codec", "fedsim.studies.fpl.baselines"])
def test_a_deprecation_met_in_fedsim_is_an_error(module, category):
    with pytest.raises(category, match="going away"):
        _warner(module, category)()


@pytest.mark.parametrize("category", [DeprecationWarning, FutureWarning])
def test_a_deprecation_inside_another_library_is_a_warning(category):
    with pytest.warns(category, match="going away"):
        _warner("numpy.somewhere", category)()
