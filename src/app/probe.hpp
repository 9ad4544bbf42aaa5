#pragma once
// A checkpoint given on the command line is read once in a child process before qkv reads it
// itself. HDF5 1.10.8 has bugs that a crafted file can reach (see docs/reliability.md): in the
// child they cost a child, and the command reports the file instead of crashing.

#include <string>

namespace qkv::app {

/// How the caller goes on to read the checkpoint; the child reads it the same way, and only so.
enum class ProbeRead {
  Load,     ///< io::load_checkpoint: every command that loads a model or resumes a run
  Inspect,  ///< io::inspect: `qkv inspect`, which walks every dataset and attribute
};

/// Read `path` as `read` says, in a forked child with bounded memory (its address space may grow
/// by 2 GiB + 4x the file size) and time (`timeout_seconds`). Returns when the child finished
/// (whether or not it found an error: the caller then reads the file itself and reports that error
/// normally). Throws io::IoError naming the file when the child was killed by a signal, ran out of
/// its memory bound, or ran out of time. Does nothing when launched by mpirun (forking an MPI
/// process is unsafe with some transports) or when QKV_NO_PROBE is set.
void probe_checkpoint(const std::string& path, ProbeRead read = ProbeRead::Load, int timeout_seconds = 120);

}  // namespace qkv::app
