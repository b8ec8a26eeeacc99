/* Restart-latency workload: appends "S <ns>" as the first thing main does
 * and "E <ns>" as the last thing before _exit, using CLOCK_MONOTONIC, so
 * the gap between one run's E and the next run's S is the time from the
 * workload's exit to the next workload running: reaping, deciding, fork,
 * exec and (static) program start. Exits 42 until it has run PROBE_N times. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static long long now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(void) {
	long long start = now();
	const char *log = getenv("PROBE_LOG");
	const char *ns = getenv("PROBE_N");
	char buf[64], path[4096];
	int fd, n, len, count = 0;
	if (!log || !ns)
		return 3;
	fd = open(log, O_WRONLY | O_APPEND | O_CREAT, 0644);
	len = snprintf(buf, sizeof buf, "S %lld\n", start);
	if (write(fd, buf, len) != len)
		return 3;
	snprintf(path, sizeof path, "%s.count", log);
	n = open(path, O_RDWR | O_CREAT, 0644);
	memset(buf, 0, sizeof buf);
	if (read(n, buf, sizeof buf - 1) > 0)
		count = atoi(buf);
	count++;
	len = snprintf(buf, sizeof buf, "%d\n", count);
	if (pwrite(n, buf, len, 0) != len)
		return 3;
	close(n);
	len = snprintf(buf, sizeof buf, "E %lld\n", now());
	if (write(fd, buf, len) != len)
		return 3;
	_exit(count >= atoi(ns) ? 0 : 42);
}
