/* The peer ibcache's UDP transfer is measured against ("UDP 4 KiB pages,
 * tuned"): the best plain-socket way to move a file's
 * 4 KiB pages -- one page per datagram (8-byte page number + the page),
 * sendmmsg batches of 64, recvmmsg batches of 64, and the simplest flow
 * control that loses nothing: the receiver grants credit every 64 pages,
 * the sender never has more than a window of pages unacknowledged.
 *
 *   udp_pages_peer serve PORT FILE [ADDR]     answer transfers until killed,
 *                                             on ADDR (IPv4; default 127.0.0.1)
 *   udp_pages_peer fetch HOST PORT [WINDOW] [REPEAT]
 *                                             the whole file to stdout; prints
 *                                             "pages=N seconds=S pages_per_s=R
 *                                             GBps=G lost=L" on stderr
 *
 * A transfer: the client sends "GO" + a 32-bit window; the server answers
 * with the file size, then pages; the client sends a 64-bit count of pages
 * received as credit; "BYE" ends it.  A lost datagram would stall the
 * transfer (there is no resend): lost= counts pages that never came. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PAGE	4096
#define HDR	8
#define BATCH	64
#define DG	(HDR + PAGE)

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void bufs(int fd)
{
	int b = 4 << 20;

	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &b, sizeof(b)) < 0)
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &b, sizeof(b));
	if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &b, sizeof(b)) < 0)
		setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &b, sizeof(b));
}

static int serve(int port, const char *path, const char *addr)
{
	int fd = socket(AF_INET, SOCK_DGRAM, 0), ffd = open(path, O_RDONLY);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	static uint8_t pages[BATCH * PAGE];
	static uint64_t hdr[BATCH];
	struct mmsghdr mm[BATCH];
	struct iovec iov[2 * BATCH];
	struct stat st;

	if (addr && inet_pton(AF_INET, addr, &a.sin_addr) != 1) {
		fprintf(stderr, "udp_pages_peer serve: '%s' is not an IPv4 address\n", addr);
		return 2;
	}
	if (fd < 0 || ffd < 0 || fstat(ffd, &st) < 0 || bind(fd, (void *)&a, sizeof(a)) < 0) {
		perror("udp_pages_peer serve");
		return 1;
	}
	bufs(fd);
	printf("listening %d\n", port);
	fflush(stdout);
	for (;;) {
		struct sockaddr_in cli;
		socklen_t cl = sizeof(cli);
		uint8_t msg[64];
		ssize_t n = recvfrom(fd, msg, sizeof(msg), 0, (void *)&cli, &cl);
		uint64_t npages = ((uint64_t)st.st_size + PAGE - 1) / PAGE, sent = 0, acked = 0;
		uint32_t window;

		if (n != 6 || memcmp(msg, "GO", 2))
			continue;
		memcpy(&window, msg + 2, 4);
		fstat(ffd, &st);
		npages = ((uint64_t)st.st_size + PAGE - 1) / PAGE;
		{
			uint64_t sz = (uint64_t)st.st_size;

			sendto(fd, &sz, sizeof(sz), 0, (void *)&cli, cl);
		}
		while (acked < npages) {
			/* send what the window allows, a batch at a time */
			while (sent < npages && sent - acked < window) {
				int k = 0;

				for (; k < BATCH && sent + (uint64_t)k < npages &&
				       sent + (uint64_t)k - acked < window; k++)
					;
				/* one read for the batch, then a header and a page per
				 * datagram (two iovecs: no copy) */
				ssize_t r = pread(ffd, pages, (size_t)k * PAGE, (off_t)(sent * PAGE));

				if (r < (ssize_t)k * PAGE)
					memset(pages + (r > 0 ? r : 0), 0,
					       (size_t)k * PAGE - (size_t)(r > 0 ? r : 0));
				for (int i = 0; i < k; i++) {
					hdr[i] = sent + (uint64_t)i;
					iov[2 * i] = (struct iovec){ &hdr[i], HDR };
					iov[2 * i + 1] = (struct iovec){ pages + (size_t)i * PAGE, PAGE };
					mm[i].msg_hdr = (struct msghdr){ .msg_name = &cli, .msg_namelen = cl,
									 .msg_iov = &iov[2 * i], .msg_iovlen = 2 };
				}
				int s = sendmmsg(fd, mm, (unsigned)k, 0);

				if (s < 0) {
					perror("sendmmsg");
					return 1;
				}
				sent += (uint64_t)s;
			}
			/* credit from the receiver */
			uint8_t c[16];
			struct pollfd pf = { fd, POLLIN, 0 };

			if (poll(&pf, 1, 1000) <= 0)
				break;	/* the receiver went away or lost pages */
			n = recv(fd, c, sizeof(c), 0);
			if (n == 8) {
				uint64_t v;

				memcpy(&v, c, 8);
				if (v > acked)
					acked = v;
			} else if (n == 3 && !memcmp(c, "BYE", 3)) {
				break;
			}
		}
	}
}

static int fetch(const char *host, int port, uint32_t window, int repeat)
{
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	static uint8_t ring[BATCH][DG];
	struct mmsghdr mm[BATCH];
	struct iovec iov[BATCH];
	uint8_t *file = NULL;
	uint64_t size = 0, npages = 0, total = 0, lost = 0;
	double t0, t = 0;

	inet_pton(AF_INET, host, &a.sin_addr);
	if (fd < 0 || connect(fd, (void *)&a, sizeof(a)) < 0) {
		perror("udp_pages_peer fetch");
		return 1;
	}
	bufs(fd);
	for (int r = 0; r < repeat; r++) {
		uint8_t go[6] = { 'G', 'O' };
		uint64_t got = 0, credit_at = 0;
		struct pollfd pf = { fd, POLLIN, 0 };

		memcpy(go + 2, &window, 4);
		t0 = now_s();
		send(fd, go, sizeof(go), 0);
		if (poll(&pf, 1, 2000) <= 0 || recv(fd, &size, sizeof(size), 0) != 8) {
			fprintf(stderr, "udp_pages_peer: no answer\n");
			return 1;
		}
		npages = (size + PAGE - 1) / PAGE;
		if (!file && !(file = malloc(npages * PAGE + 1)))
			return 1;
		while (got < npages) {
			for (int i = 0; i < BATCH; i++) {
				iov[i] = (struct iovec){ ring[i], DG };
				mm[i].msg_hdr = (struct msghdr){ .msg_iov = &iov[i], .msg_iovlen = 1 };
			}
			if (poll(&pf, 1, 1000) <= 0)
				break;
			int n = recvmmsg(fd, mm, BATCH, MSG_DONTWAIT, NULL);

			for (int i = 0; i < n; i++) {
				uint64_t p;

				if (mm[i].msg_len != DG)
					continue;
				memcpy(&p, ring[i], HDR);
				if (p < npages)
					memcpy(file + p * PAGE, ring[i] + HDR, PAGE);
				got++;
			}
			if (got - credit_at >= BATCH || got == npages) {
				send(fd, &got, sizeof(got), 0);
				credit_at = got;
			}
		}
		send(fd, "BYE", 3, 0);
		t += now_s() - t0;
		total += got;
		lost += npages - got;
		if (r == 0) {
			for (uint64_t o = 0; o < size;) {
				ssize_t w = write(1, file + o, size - o);

				if (w <= 0)
					break;
				o += (uint64_t)w;
			}
		}
	}
	fprintf(stderr, "pages=%llu seconds=%.4f pages_per_s=%.0f GBps=%.3f lost=%llu\n",
		(unsigned long long)total, t, total / t, total * (double)PAGE / t / 1e9,
		(unsigned long long)lost);
	free(file);
	return lost ? 1 : 0;
}

static long num(const char *s, long min, long max)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < min || v > max) {
		fprintf(stderr, "udp_pages_peer: '%s': not a number in %ld..%ld\n", s, min, max);
		exit(2);
	}
	return v;
}

int main(int argc, char **argv)
{
	if ((argc == 4 || argc == 5) && !strcmp(argv[1], "serve"))
		return serve((int)num(argv[2], 1, 65535), argv[3], argc == 5 ? argv[4] : NULL);
	if (argc >= 4 && !strcmp(argv[1], "fetch"))
		return fetch(argv[2], (int)num(argv[3], 1, 65535),
			     argc > 4 ? (uint32_t)num(argv[4], 1, 1 << 20) : 512,
			     argc > 5 ? (int)num(argv[5], 1, 1000000) : 1);
	fprintf(stderr, "usage: udp_pages_peer serve PORT FILE [ADDR] | fetch HOST PORT [WINDOW] [REPEAT]\n");
	return 2;
}
