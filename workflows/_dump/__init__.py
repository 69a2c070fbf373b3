"""What comes back from a sandbox, and how it is made safe before it touches this machine.

- :mod:`._archive`: reading a dump (tar.gz) in one forward pass, bounded and checked, into a
  :class:`~workflows.Snapshot` or a stream of files; the archive core's refusals
  (:mod:`klavis_archive`) in the library's words (:class:`~workflows.UnsafeArchiveError`).
- :mod:`._read_along`: the download's sink that ``sb.dump()`` reads as it arrives.
- :mod:`._limits`: :class:`~workflows.ArchiveLimits`, the bounds a dump is read under.
- :mod:`._extract`: ``dump_to``'s extraction into a staging folder, moved into place only once
  the whole archive passed.
- :mod:`._staging`: the staging entries, named for their process and swept when stale.

Where a member may land (the workspace's links, names this machine can hold) is
:mod:`workflows._paths`, shared with seeding; the member time and progress callback shared with
packing are :mod:`workflows._tar_common`. The download itself (size and time bounds of a
signed-URL transfer) is :mod:`workflows._transfer`.
"""
