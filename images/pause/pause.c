/* The sandbox ("pause") container of a Pod: holds the Pod's namespaces, reaps the
 * zombies the kernel hands it as PID 1, and exits 0 on SIGINT or SIGTERM. Built with
 * `gcc -static` by images/build.py, so its image holds this one file. `-v` prints the
 * version and exits (the image check runs it). */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) {
    (void)sig;
    _exit(0);
}

static void reap(int sig) {
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "-v") == 0) {
        printf("kruntimes pause " PAUSE_VERSION "\n");
        return 0;
    }
    struct sigaction stop_action = {.sa_handler = stop};
    struct sigaction reap_action = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP | SA_RESTART};
    if (sigaction(SIGINT, &stop_action, NULL) < 0 || sigaction(SIGTERM, &stop_action, NULL) < 0 ||
        sigaction(SIGCHLD, &reap_action, NULL) < 0) {
        perror("pause: sigaction");
        return 1;
    }
    if (getpid() != 1) {
        fprintf(stderr, "pause: warning: not PID 1, zombies are reaped only for own children\n");
    }
    for (;;) {
        pause();
    }
}
