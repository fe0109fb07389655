// A real one-node Slurm cluster for the tests (Debian's slurmctld, slurmd and munge): its own
// munge daemon on a private socket and key, its own ports, state and logs under a temporary
// directory, so it neither needs nor disturbs a cluster the machine may run. Jobs launch MPI
// ranks with `srun --mpi=pmix` (Debian's Open MPI talks to Slurm through PMIx only).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "test_util.h"

// Skips the test when Slurm or munge is missing or the test is not root (a user's machine);
// fails under CI=true, where scripts/install-deps.sh installs them.
#define REQUIRE_SLURM()                                                                         \
  do {                                                                                          \
    if (geteuid() != 0 ||                                                                       \
        std::system("{ command -v slurmctld && command -v slurmd && command -v srun && "        \
                    "command -v munged; } >/dev/null 2>&1") != 0) {                             \
      if (::inflight::testing::InCi()) FAIL() << "CI=true but Slurm, munge or root is missing"; \
      GTEST_SKIP() << "a Slurm cluster needs root and slurmctld, slurmd, slurm-client, munge";  \
    }                                                                                           \
  } while (0)

namespace inflight::testing {

class SlurmCluster {
 public:
  SlurmCluster() {
    namespace fs = std::filesystem;
    const std::string id = std::to_string(getpid());
    dir_ = (fs::temp_directory_path() / ("slurm_" + id)).string();
    for (const char* sub : {"state", "spool", "log", "run"})
      fs::create_directories(dir_ + "/" + sub);
    // munged checks that nobody else can write its directories.
    fs::permissions(dir_, fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec);
    {
      std::ofstream key(dir_ + "/munge.key", std::ios::binary);
      std::ifstream random("/dev/urandom", std::ios::binary);
      std::string bytes(1024, '\0');
      random.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      key << bytes;
    }
    fs::permissions(dir_ + "/munge.key", fs::perms::owner_read);
    const int port = FreePortPair();
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    std::string node = host;
    node = node.substr(0, node.find('.'));
    std::ofstream(dir_ + "/slurm.conf")
        << "ClusterName=inflight\nSlurmctldHost=" << node << "(127.0.0.1)\nSlurmctldPort=" << port
        << "\nSlurmdPort=" << port + 1 << "\nSlurmUser=root\nSlurmdUser=root\n"
        << "AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket=" << dir_
        << "/munge.sock\nMpiDefault=none\nMailProg=/bin/true\n"
        << "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
        << "JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n"
        << "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\nReturnToService=2\n"
        // The node as configured, whatever this machine has (a smaller CI host stays idle).
        << "SlurmdParameters=config_overrides\n"
        << "KillWait=5\nStateSaveLocation=" << dir_ << "/state\nSlurmdSpoolDir=" << dir_
        << "/spool\nSlurmctldPidFile=" << dir_ << "/run/slurmctld.pid\nSlurmdPidFile=" << dir_
        << "/run/slurmd.pid\nSlurmctldLogFile=" << dir_
        << "/log/slurmctld.log\nSlurmdLogFile=" << dir_ << "/log/slurmd.log\nNodeName=" << node
        << " NodeAddr=127.0.0.1 CPUs=2 RealMemory=1000 State=UNKNOWN\nPartitionName=debug Nodes="
        << node << " Default=YES MaxTime=INFINITE State=UP\n";
    setenv("SLURM_CONF", (dir_ + "/slurm.conf").c_str(), 1);
    const std::string munged = "/usr/sbin/munged --force --socket=" + dir_ +
                               "/munge.sock --key-file=" + dir_ + "/munge.key --log-file=" + dir_ +
                               "/log/munged.log --pid-file=" + dir_ +
                               "/run/munged.pid --seed-file=" + dir_ + "/munged.seed";
    if (std::system(munged.c_str()) != 0) return;
    munge_ = true;
    daemons_ = true;  // whichever started is stopped by the destructor
    if (std::system("slurmctld -c && slurmd -c") != 0) return;
    // Up when the node is idle (about 0.1 s here).
    for (int i = 0; i < 200; ++i) {
      if (std::system("sinfo -h -o %t 2>/dev/null | grep -qx idle") == 0) {
        ok_ = true;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  ~SlurmCluster() {
    if (daemons_) {
      // The jobs' processes first (they outlive slurmd otherwise), then the daemons.
      std::system("scancel --full --quiet --user=root >/dev/null 2>&1");
      for (int i = 0; i < 150; ++i) {
        if (std::system("test -z \"$(squeue -h 2>/dev/null)\"") == 0) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      std::system("scontrol shutdown >/dev/null 2>&1");
      for (const char* daemon : {"slurmctld", "slurmd"}) {
        for (int i = 0; i < 50 && Running(daemon); ++i)
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        if (Running(daemon)) kill(Pid(daemon), SIGKILL);
      }
    }
    if (munge_) std::system(("/usr/sbin/munged --stop --socket=" + dir_ + "/munge.sock").c_str());
    unsetenv("SLURM_CONF");
    std::filesystem::remove_all(dir_);
  }

  bool ok() const { return ok_; }
  const std::string& dir() const { return dir_; }
  // What the daemons logged, for a failure message.
  std::string Logs() const {
    std::string out;
    for (const char* name : {"slurmctld.log", "slurmd.log"}) {
      std::ifstream in(dir_ + "/log/" + name);
      out += std::string("== ") + name + "\n" +
             std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    return out;
  }

 private:
  pid_t Pid(const std::string& daemon) const {
    std::ifstream pid_file(dir_ + "/run/" + daemon + ".pid");
    pid_t pid = 0;
    return pid_file >> pid ? pid : 0;
  }
  bool Running(const std::string& daemon) const {
    const pid_t pid = Pid(daemon);
    return pid > 0 && kill(pid, 0) == 0;
  }
  // Two consecutive loopback ports nothing listens on, below the ephemeral range.
  static int FreePortPair() {
    auto free = [](int port) {
      const int fd = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<uint16_t>(port));
      a.sin_addr.s_addr = htonl(INADDR_ANY);
      const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
      close(fd);
      return ok;
    };
    const int first = 20000 + 2 * static_cast<int>(getpid() % 5000);
    for (int port = first; port < 32000; port += 2)
      if (free(port) && free(port + 1)) return port;
    return first;
  }

  std::string dir_;
  bool munge_ = false, daemons_ = false, ok_ = false;
};

}  // namespace inflight::testing
