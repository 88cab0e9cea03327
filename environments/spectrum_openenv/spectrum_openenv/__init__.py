"""spectrum-rft's memory task as an OpenEnv environment (``openenv`` 0.10, the package formerly ``openenv-core``).

    uvicorn spectrum_openenv.server:app --port 8000        # the server: one SpectrumEnv per session

    from spectrum_openenv import SpectrumEnvClient, SpectrumAction
    async with SpectrumEnvClient(base_url="http://127.0.0.1:8000") as env:
        r = await env.reset(row_id="eval-r0000")
        r = await env.step(SpectrumAction(tool="submit_report", arguments='{"center_freqs": [41.5]}'))

The server is :mod:`spectrum_openenv.server`; the client, the episode driver's transport and the TRL-shaped
tool env are :mod:`spectrum_openenv.client`. The client side does not import the server (nor fastmcp).
"""

from spectrum_openenv.client import OpenEnvEpisode, OpenEnvToolEnv, SpectrumEnvClient
from spectrum_openenv.models import SpectrumAction, SpectrumObservation, SpectrumState
from spectrum_rft.rollouts.driver import Played, play  # the episode driver, for a caller of this transport

__all__ = ["OpenEnvEpisode", "OpenEnvToolEnv", "Played", "SpectrumAction", "SpectrumEnvClient", "SpectrumObservation",
           "SpectrumState", "play"]
