"""dxt-archive benchmarks: ``python -m benchmarks`` (or ``./run bench``)."""


def peak_rss_mb() -> float:
    """This process's peak RSS since exec (``VmHWM``). ``ru_maxrss`` is not used: on Linux it
    keeps the high-water mark of the (v)forked parent's image across ``execve``, so a small
    child of a large parent would report the parent's peak."""
    import resource
    from pathlib import Path

    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
