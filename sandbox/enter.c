/* Enter a running sandbox and run one command there with a task's privileges: sandbox/enter.py's steps, compiled.
 * Runs on: the host, as `/proc/self/fd/BINARY FD` from sandbox.core (a sealed memfd of what `python -m
 * sandbox.build_enter` built), in place of `sh` (the cgroup), `prlimit` and `python -I -S enter.py`: their steps.
 *
 * FD is an inherited memfd holding the spec sandbox/entry.py writes (NUL-terminated fields, then the seccomp
 * program core built with enter.py's seccomp_filter). Why a compiled helper and the steps: docs/sandbox.md. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

enum { EXIT_CGROUP = 125, EXIT_CANNOT_RUN = 127, EXIT_SANDBOX_GONE = 251, EXIT_ENTER_FAILED = 252 };
#define SPEC_FORMAT "1"
#define NAMESPACES (CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWCGROUP)

static void fail(int code, const char *what, const char *detail) {
    char line[512];
    int n = snprintf(line, sizeof line, "sandbox: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    if (write(2, line, n > 0 && n < (int)sizeof line ? (size_t)n : strlen(line)) < 0) { /* nothing more to say */ }
    _exit(code);
}

static void check(int rc, const char *what) {
    if (rc != 0) fail(EXIT_ENTER_FAILED, what, strerror(errno));
}

/* the spec: NUL-terminated fields, read one at a time */
static char *cur, *end;

static char *field(void) {
    char *s = cur, *nul = cur < end ? memchr(cur, 0, (size_t)(end - cur)) : NULL;
    if (!nul) fail(EXIT_ENTER_FAILED, "a malformed spec", NULL);
    cur = nul + 1;
    return s;
}

static long long number(void) {
    char *s = field(), *rest;
    errno = 0;
    long long v = strtoll(s, &rest, 10);
    if (errno || rest == s || *rest) fail(EXIT_ENTER_FAILED, "a malformed number in the spec", s);
    return v;
}

static char **strings(void) {  /* a count, then that many fields: a NULL-terminated array */
    long long n = number();
    if (n < 0 || n > (end - cur)) fail(EXIT_ENTER_FAILED, "a malformed count in the spec", NULL);
    char **out = calloc((size_t)n + 1, sizeof *out);
    if (!out) fail(EXIT_ENTER_FAILED, "out of memory", NULL);
    for (long long i = 0; i < n; i++) out[i] = field();
    return out;
}

static int child;

static void forward(int sig) {
    kill(child, sig);
}

int main(int argc, char **argv) {
    if (argc != 2) fail(EXIT_ENTER_FAILED, "usage: enter SPEC_FD", NULL);
    int spec_fd = atoi(argv[1]);
    struct stat st;
    check(fstat(spec_fd, &st), "the spec");
    char *spec = malloc((size_t)st.st_size + 1);
    if (!spec) fail(EXIT_ENTER_FAILED, "out of memory", NULL);
    size_t got = 0;
    for (ssize_t n; got < (size_t)st.st_size; got += (size_t)n)
        if ((n = read(spec_fd, spec + got, (size_t)st.st_size - got)) <= 0)
            fail(EXIT_ENTER_FAILED, "the spec", "short read");
    close(spec_fd);
    cur = spec, end = spec + got;
    if (strcmp(field(), SPEC_FORMAT) != 0) fail(EXIT_ENTER_FAILED, "a spec of another format", NULL);
    pid_t pid = (pid_t)number();
    int pidfd = (int)number(), userns = (int)number();
    uid_t uid = (uid_t)number();
    gid_t gid = (gid_t)number();
    char **group_names = strings();
    unsigned long long keep = strtoull(field(), NULL, 10);
    char **cgroups = strings(), **rlimits = strings(), **cmd = strings(), **env = strings();
    long long filter_len = number();
    if (filter_len < 0 || filter_len % 8 || filter_len != end - cur)
        fail(EXIT_ENTER_FAILED, "a malformed seccomp program", NULL);
    size_t ngroups = 0;
    while (group_names[ngroups]) ngroups++;
    gid_t *groups = calloc(ngroups + 1, sizeof *groups);
    for (size_t i = 0; i < ngroups; i++) groups[i] = (gid_t)strtoul(group_names[i], NULL, 10);
    if (!cmd[0]) fail(EXIT_ENTER_FAILED, "no command", NULL);
    /* What a process of the sandbox can read of this one once its child is in the PID namespace names no host path:
     * no fd but 0-2 and the pidfd (core also passes the sealed memfd this binary runs from), an empty environment
     * (core's), and neither command line nor name. */
    if (pidfd > 3) syscall(SYS_close_range, 3, pidfd - 1, 0);
    syscall(SYS_close_range, pidfd < 3 ? 3 : pidfd + 1, ~0U, 0);
    size_t room = strlen(argv[0]);
    for (int i = 0; i < argc; i++) memset(argv[i], 0, strlen(argv[i]));
    if (room >= 13) memcpy(argv[0], "sandbox-enter", 13);
    prctl(PR_SET_NAME, "sandbox-enter", 0, 0, 0);

    /* 0. what `sh -c 'echo $$ > cgroup.procs'` and `prlimit` did, and what the Python entry's start left */
    char self[24];
    int len = snprintf(self, sizeof self, "%d", (int)getpid());
    for (char **f = cgroups; *f; f++) {
        int fd = open(*f, O_WRONLY | O_CLOEXEC);
        if (fd < 0 || write(fd, self, (size_t)len) != len) fail(EXIT_CGROUP, *f, strerror(errno));
        close(fd);
    }
    for (char **r = rlimits; r[0] && r[1]; r += 2) {
        struct rlimit lim = {strtoull(r[1], NULL, 10), strtoull(r[1], NULL, 10)};
        check(setrlimit(atoi(r[0]), &lim), "setrlimit");
    }
    /* every signal at its default, whatever the host process ignored (nohup: SIGHUP; a background job: SIGINT, SIGQUIT;
     * SIGCHLD, which would leave waitpid nothing to wait for); the command inherits these, but SIGPIPE and SIGXFSZ
     * ignored as Python ignores them at start (enter.py's commands inherit both ignored) */
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    for (int sig = 1; sig < NSIG; sig++)
        if (sig != SIGKILL && sig != SIGSTOP) sigaction(sig, &dfl, NULL);  /* EINVAL for the C library's own: kept */
    signal(SIGPIPE, SIG_IGN);
    signal(SIGXFSZ, SIG_IGN);
    int last_cap = 40, fd = open("/proc/sys/kernel/cap_last_cap", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        char buf[16] = {0};
        if (read(fd, buf, sizeof buf - 1) > 0) last_cap = atoi(buf);
        close(fd);
    }
    /* 1. the host side: the OOM killer picks commands first; PID 1's root, checked with its pidfd */
    if ((fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC)) >= 0) {
        if (write(fd, "500", 3) != 3) { /* as enter.py: best effort */ }
        close(fd);
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/root", (int)pid);
    int root_fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    struct pollfd p = {.fd = pidfd, .events = POLLIN};
    if (poll(&p, 1, 0) != 0 || root_fd < 0)
        fail(EXIT_SANDBOX_GONE, "the sandbox is not running any more (its PID 1 is gone)", NULL);
    if (setns(pidfd, NAMESPACES | (userns ? CLONE_NEWUSER : 0)) != 0) {
        if (errno == ESRCH) fail(EXIT_SANDBOX_GONE, "the sandbox is not running any more (its PID 1 is gone)", NULL);
        fail(EXIT_ENTER_FAILED, "cannot enter the sandbox's namespaces (setns by pidfd needs Linux >= 5.8)",
             strerror(errno));
    }
    close(pidfd);
    /* 2. into the sandbox's root */
    check(fchdir(root_fd), "fchdir");
    check(chroot("."), "chroot");
    close(root_fd);
    check(chdir("/"), "chdir");
    /* 3. privileges: nothing of the sandbox has run yet */
    for (int cap = 0; cap <= last_cap; cap++)
        if (!(keep >> cap & 1) && prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL)
            fail(EXIT_ENTER_FAILED, "drop a capability from the bounding set", strerror(errno));
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    if (!userns) {
        check(setgroups(ngroups, groups), "setgroups");
        check(setgid(gid), "setgid");
    }
    if (uid != 0) {
        check(setresuid(uid, uid, uid), "setresuid");  /* a non-root uid: permitted and effective are cleared */
        keep = 0;
    }
    struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2] = {{0}};
    for (int i = 0; i < 2; i++) data[i].effective = data[i].permitted = (unsigned)(keep >> (32 * i));
    check((int)syscall(SYS_capset, &hdr, data), "capset");
    check(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "PR_SET_NO_NEW_PRIVS");
    if (filter_len > 0) {
        struct sock_fprog prog = {(unsigned short)(filter_len / 8), (struct sock_filter *)cur};
        check(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0), "seccomp");
    }
    /* 4. the PID namespace applies to children. The signals forwarded to the command are blocked from before the fork
     * until their handlers are in: one its group gets meanwhile waits, then is forwarded, and this process always
     * ends as the command did. The command starts with nothing blocked, whatever the host process blocked. */
    int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
    sigset_t forwarded, none;
    sigemptyset(&forwarded);
    sigemptyset(&none);
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) sigaddset(&forwarded, sigs[i]);
    check(sigprocmask(SIG_BLOCK, &forwarded, NULL), "sigprocmask");
    child = fork();
    if (child < 0) fail(EXIT_ENTER_FAILED, "fork", strerror(errno));
    if (child == 0) {
        sigprocmask(SIG_SETMASK, &none, NULL);
        execve(cmd[0], cmd, env);
        fail(EXIT_CANNOT_RUN, cmd[0], strerror(errno));
    }
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) signal(sigs[i], forward);
    sigprocmask(SIG_SETMASK, &none, NULL);
    int status;
    while (waitpid(child, &status, 0) < 0)
        if (errno != EINTR) fail(EXIT_ENTER_FAILED, "waitpid", strerror(errno));
    if (WIFSIGNALED(status)) {
        signal(WTERMSIG(status), SIG_DFL);
        kill(getpid(), WTERMSIG(status));
        _exit(128 + WTERMSIG(status));
    }
    _exit(WEXITSTATUS(status));
}
