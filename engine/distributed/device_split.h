// One sharded run split into runs of fewer devices (one per process), and their results joined.
//
// A run of D devices is D independent programs: device d runs its own prompts with its own key
// (split(PRNGKey(seed), D)[d], or GenerationRequest::device_keys[d]) and shares nothing with
// the others but the weights. So devices [begin, end) can run anywhere — another process, another
// host — as a run of end − begin devices given those prompts and keys (and the slices of any
// per-device inputs), and give bit-identical images. This is the MPI path's arithmetic
// (engine/cli/mpi/); it knows nothing of MPI.
#pragma once

#include <string>
#include <vector>

#include "pipeline/generation.h"
#include "pipeline/sharded_pipeline.h"

namespace octodiff {

struct DeviceRange {
  int begin = 0, end = 0;  // devices [begin, end) of the whole run
  int size() const { return end - begin; }
};

// `devices` split into `parts` contiguous ranges, in order, sizes differing by at most one (the
// first ones larger); ranges are empty when parts > devices.
std::vector<DeviceRange> split_devices(int devices, int parts);

// Every device's key in the whole run: the request's own, or split(PRNGKey(seed), D).
std::vector<jax::Key> whole_run_device_keys(const ResolvedRequest& whole);

// The request that runs devices `range` of `whole` as a run of its own: their prompts, keys and
// slices of every per-device input (latents, noises, init images, masks, control images).
GenerationRequest device_subset_request(const ResolvedRequest& whole, DeviceRange range);

// The whole run's result from the results of its ranges (in device order, covering 0..D, empty
// ranges left out): images, latents, keys, prompts and context lengths concatenated; warnings
// and embeddings in order of first appearance; timings the slowest part's (wall clock), the
// per-step means weighted by devices.
GenerationResult join_device_results(const ResolvedRequest& whole, const std::vector<GenerationResult>& parts);

}  // namespace octodiff
