"""The state the tasks meet on: the subscription and assignment board.

A wing of its own because both other wings depend on it and on nothing of each
other: the coordination routine writes the assignment, the fetcher and the facade
read it and await its futures.  ``aiogroup._fetch`` never imports
``aiogroup._coordination``; both import this.
"""
