"""The test suite's shared set-up: the Hypothesis profile (see ``hypothesis_profiles``), the
modules' objects kept out of the collector's way, and the servers started once per run (per
xdist worker) rather than per module."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

# pytest imports this file in its default `prepend` mode, which puts tests/ on sys.path: the
# test modules of the layer folders (core/, streams/, adapters/, engines/, tools/) import the
# support modules here by name.
import hypothesis_profiles  # noqa: F401  (loads the profile before any test module is imported)
from fake_providers import FakeProviders
from fake_upstream import FakeUpstream, Served
from litellm_support import recipe_blocks, recipe_proxy, repository


def pytest_collection_finish(session: pytest.Session) -> None:
    """Move what the test modules imported (the SDKs, LiteLLM, Hypothesis: about 900,000
    objects) to the collector's permanent generation: the many tests that call
    ``gc.collect()`` to check what a dropped stream finalizes then take microseconds rather
    than about a second each. Only objects that exist now are frozen; what tests create is
    collected as usual."""
    gc.collect()
    gc.freeze()


@pytest.fixture(scope="session")
def providers_server() -> Iterator[tuple[FakeProviders, Served]]:
    """The fake OpenAI (Chat and Responses), Anthropic and Gemini APIs, on loopback."""
    fake = FakeProviders()
    with Served(fake) as served:
        yield fake, served


@pytest.fixture(scope="session")
def litellm_upstream() -> Iterator[tuple[FakeUpstream, Served]]:
    """The fake OpenAI-compatible upstream of the LiteLLM proxy."""
    fake = FakeUpstream()
    with Served(fake) as served:
        yield fake, served


@pytest.fixture(scope="session")
def litellm_proxy(
    request: pytest.FixtureRequest,
    litellm_upstream: tuple[FakeUpstream, Served],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[object]:
    """The LiteLLM proxy of ``docs/litellm.md``'s recipe (a ``litellm_support.RecipeProxy``),
    its models sent to ``litellm_upstream``. Starting it takes seconds: once per run. (Not
    importing the proxy's server here saves each worker 6 s; without the packages it needs, it
    exits at start-up naming them, and the test shows its output.)"""
    blocks = recipe_blocks(repository(request.config) / "docs" / "litellm.md")
    directory = tmp_path_factory.mktemp("recipe")
    with recipe_proxy(blocks, litellm_upstream[1].url + "/v1", directory) as proxy:
        yield proxy
