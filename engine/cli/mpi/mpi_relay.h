// A rank's MPI process (mpi_comm.h): MPI_Init, then the MPI calls its compute process asks for
// over `link` (rank_link.h), until that process ends. Then, by how it ended:
//   - it finished (exit status 0, or an error it printed itself, after rank 0 let it go):
//     MPI_Finalize, and exit with its status — the job's status is rank 0's;
//   - it died (a signal, or an exit before rank 0 let it go): on rank r > 0, rank 0 is told
//     "rank r (host H) died: signal 11 (Segmentation fault)" and ends the run in order; on rank 0
//     the error is printed here and the job ended (MPI_Abort).
// For tests only: OCTODIFF_TEST_RANK_EXIT=R makes rank R's MPI process itself end without a word
// when it relays its first unit of work, as a killed MPI process would (then mpirun ends the job).
#pragma once

#include <sys/types.h>

namespace octodiff::cli::mpi {

[[noreturn]] void run_mpi_process(int link, pid_t compute_process);

}  // namespace octodiff::cli::mpi
