"""luminal-search: search-based compilation with egglog, timed on the device, cached.

    import luminal as lm
    from luminal_search import Search

    search = Search(lm.backend("cpu"))
    g.compile((lm.GenericCompiler(), search))
    print(search.explain())

Also `luminal.plugins.compiler("search", backend=lm.backend("cpu"))`. See README.md.
"""

from .candidates import Candidate, RegionResult, WholeGraph
from .egraph import Limits
from .search import Search, SearchReport
from .version import SEARCH_VERSION

__version__ = "0.1.0"

__all__ = ["SEARCH_VERSION", "Candidate", "Limits", "RegionResult", "Search", "SearchReport",
           "WholeGraph"]
