/* A busy-polling ping-pong over plain sockets: the peer xprobe's busy
 * latency rows are measured against (qperf sleeps in recv, xprobe spins:
 * each is compared with a peer in its own mode).  Both ends read with
 * MSG_DONTWAIT in a loop and never sleep; TCP with TCP_NODELAY.
 *
 *   busy_pingpong serve tcp|udp PORT            echo until killed
 *   busy_pingpong ping tcp|udp HOST PORT [COUNT [SIZE]]
 *                                               prints "rtt_avg_ns=A rtt_p50_ns=P"
 *
 * COUNT round trips (default 100000) after 1000 unmeasured, SIZE bytes
 * each (default 8); every reply is checked against what was sent. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define WARMUP 1000
#define MAXSZ 65536

static uint64_t now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static long num(const char *s, long lo, long hi)
{
	char *e;
	long v = strtol(s, &e, 10);

	if (*e || v < lo || v > hi) {
		fprintf(stderr, "busy_pingpong: '%s' is not a number in %ld..%ld\n", s, lo, hi);
		exit(2);
	}
	return v;
}

/* All of len bytes, spinning (TCP); one datagram (UDP).  0, or -1 on an
 * error or a closed peer. */
static int recv_all(int fd, uint8_t *b, size_t len, int udp, struct sockaddr_in *from)
{
	size_t got = 0;

	while (got < len) {
		socklen_t fl = sizeof(*from);
		ssize_t n = udp ? recvfrom(fd, b, MAXSZ, MSG_DONTWAIT, (struct sockaddr *)from, &fl)
				: recv(fd, b + got, len - got, MSG_DONTWAIT);

		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (n <= 0)
			return -1;
		if (udp)
			return (size_t)n == len ? 0 : -1;
		got += (size_t)n;
	}
	return 0;
}

static int send_all(int fd, const uint8_t *b, size_t len, int udp, const struct sockaddr_in *to)
{
	size_t put = 0;

	while (put < len) {
		ssize_t n = udp ? sendto(fd, b, len, 0, (const struct sockaddr *)to, sizeof(*to))
				: send(fd, b + put, len - put, MSG_NOSIGNAL);

		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (n <= 0)
			return -1;
		put += (size_t)n;
	}
	return 0;
}

static int serve(int udp, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) }, from;
	int one = 1, fd = socket(AF_INET, udp ? SOCK_DGRAM : SOCK_STREAM, 0);
	static uint8_t b[MAXSZ];

	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || (!udp && listen(fd, 4) < 0)) {
		perror("busy_pingpong serve");
		return 1;
	}
	printf("listening %d\n", port);
	fflush(stdout);
	for (;;) {
		int c = fd;
		uint32_t size;

		if (!udp) {
			c = accept(fd, NULL, NULL);
			if (c < 0)
				continue;
			setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
			/* the size first, then echoes of that size */
			if (recv_all(c, (uint8_t *)&size, 4, 0, &from) || size > MAXSZ) {
				close(c);
				continue;
			}
			while (!recv_all(c, b, size, 0, &from) && !send_all(c, b, size, 0, &from))
				;
			close(c);
			continue;
		}
		for (;;) {
			socklen_t fl = sizeof(from);
			ssize_t n = recvfrom(fd, b, sizeof(b), MSG_DONTWAIT, (struct sockaddr *)&from, &fl);

			if (n > 0)
				sendto(fd, b, (size_t)n, 0, (struct sockaddr *)&from, fl);
		}
	}
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static int ping(int udp, const char *host, int port, long count, long size)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) }, from;
	int one = 1, fd = socket(AF_INET, udp ? SOCK_DGRAM : SOCK_STREAM, 0);
	uint64_t *rtt = malloc((size_t)count * sizeof(*rtt)), sum = 0;
	static uint8_t tx[MAXSZ], rx[MAXSZ];
	uint32_t sz = (uint32_t)size;

	if (inet_pton(AF_INET, host, &a.sin_addr) != 1) {
		fprintf(stderr, "busy_pingpong: '%s' is not an IPv4 address\n", host);
		return 2;
	}
	if (fd < 0 || !rtt || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		perror("busy_pingpong ping");
		return 1;
	}
	if (!udp) {
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (send_all(fd, (uint8_t *)&sz, 4, 0, &a))
			return perror("busy_pingpong: send"), 1;
	}
	for (long i = -WARMUP; i < count; i++) {
		uint64_t t0;

		memcpy(tx, &i, sizeof(i) < (size_t)size ? sizeof(i) : (size_t)size);
		t0 = now_ns();
		if (send_all(fd, tx, (size_t)size, udp, &a) || recv_all(fd, rx, (size_t)size, udp, &from)) {
			fprintf(stderr, "busy_pingpong: round trip %ld: %s\n", i,
				errno ? strerror(errno) : "peer closed");
			return 1;
		}
		if (memcmp(tx, rx, (size_t)size)) {
			fprintf(stderr, "busy_pingpong: reply %ld differs from what was sent\n", i);
			return 1;
		}
		if (i >= 0) {
			rtt[i] = now_ns() - t0;
			sum += rtt[i];
		}
	}
	qsort(rtt, (size_t)count, sizeof(*rtt), cmp_u64);
	printf("rtt_avg_ns=%llu rtt_p50_ns=%llu\n", (unsigned long long)(sum / (uint64_t)count),
	       (unsigned long long)rtt[count / 2]);
	free(rtt);
	close(fd);
	return 0;
}

int main(int argc, char **argv)
{
	int udp;

	if (argc < 4 || (strcmp(argv[2], "tcp") && strcmp(argv[2], "udp")))
		goto usage;
	udp = !strcmp(argv[2], "udp");
	if (!strcmp(argv[1], "serve") && argc == 4)
		return serve(udp, (int)num(argv[3], 1, 65535));
	if (!strcmp(argv[1], "ping") && argc >= 5 && argc <= 7)
		return ping(udp, argv[3], (int)num(argv[4], 1, 65535),
			    argc > 5 ? num(argv[5], 1, 100000000) : 100000,
			    argc > 6 ? num(argv[6], 1, MAXSZ) : 8);
usage:
	fprintf(stderr, "usage: busy_pingpong serve tcp|udp PORT | ping tcp|udp HOST PORT [COUNT [SIZE]]\n");
	return 2;
}
