# xprt — plain GNU Makefile.  `make V=1` shows the commands.
#   make            build lib/libxprt.a and every tool into $(B)/
#   make check      unit tests, bats, short fuzz runs, man lint, ASan+UBSan tests
#   make bench      benchmarks side by side with the peer tools
#   make install    PREFIX=/usr/local DESTDIR= (COMPLETIONS= for bash completion)
#   make SAN=1      build with ASan+UBSan into build-san/
#   make TSAN=1     build with TSan into build-tsan/

PREFIX  ?= /usr/local
COMPLETIONS ?= $(PREFIX)/share/bash-completion/completions
UNITDIR ?= $(PREFIX)/lib/systemd/system
DOCDIR  ?= $(PREFIX)/share/doc/xprt
DESTDIR ?=
CC      ?= cc
CFLAGS  ?= -O2 -g
WARN    := -Wall -Wextra -Wformat=2 -Wmissing-prototypes -Wshadow -Wwrite-strings \
           -Wno-unused-parameter
ifdef WERROR
WARN    += -Werror
endif
CPPFLAGS += -Ilib -D_GNU_SOURCE
# `make STAMPS=1`: the rdma backend's post/receive time stamps for
# developers (lib/xprt/xrc_stamps.h), built in build-stamps/ (or B=DIR),
# never into a normal build's objects
ifdef STAMPS
B       ?= build-stamps
CPPFLAGS += -DXRC_STAMPS
endif
LDLIBS  := -lrdmacm -libverbs -lyaml -lpthread

ifdef SAN
B       ?= build-san
CFLAGS  += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS += -fsanitize=address,undefined
else ifdef TSAN
B       ?= build-tsan
CFLAGS  += -fsanitize=thread -fno-omit-frame-pointer
LDFLAGS += -fsanitize=thread
else
B       ?= build
# Link-time optimization for the default build: the hot paths cross files
# (port engine -> links -> transports), and every call they keep costs
# (bench/README.md: rdma round trip in the Soft-RoCE VM 40 -> 32 us).
# `make LTO=` builds without; with clang (whose LTO needs its own archiver
# and linker plugin) it is off.
ifeq ($(shell $(CC) --version 2>/dev/null | grep -ci clang),0)
LTO     ?= -flto=auto
endif
CFLAGS  += $(LTO)
LDFLAGS += $(LTO)
ifneq ($(LTO),)
AR      := gcc-ar
endif
endif

ifeq ($(V),1)
Q :=
else
Q := @
endif

# --version: git describe of this checkout, else the VERSION file (a release
# tarball, a package build), else "unknown".  $(B)/version.txt holds it and
# changes (rebuilding version.o) only when it does.
XPRT_VERSION := $(shell git describe --tags --always --dirty 2>/dev/null || \
		  cat VERSION 2>/dev/null || echo unknown)

LIB_SRC   := $(sort $(wildcard lib/*/*.c))
LIB_OBJ   := $(LIB_SRC:%.c=$(B)/%.o)
LIB       := $(B)/libxprt.a

TOOLS     := $(notdir $(wildcard cmd/*))
TOOL_BINS := $(TOOLS:%=$(B)/%)

TEST_SRC  := $(sort $(wildcard tests/unit/test_*.c))
TEST_BINS := $(TEST_SRC:tests/unit/%.c=$(B)/tests/%)

BENCH_SRC  := $(sort $(wildcard bench/*.c))
BENCH_BINS := $(BENCH_SRC:bench/%.c=$(B)/bench/%)
EXAMPLE_SRC  := $(sort $(wildcard doc/examples/*.c))
EXAMPLE_BINS := $(EXAMPLE_SRC:doc/examples/%.c=$(B)/examples/%)

FUZZ_SRC  := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_BINS := $(FUZZ_SRC:tests/fuzz/%.c=build-fuzz/%)

MANPAGES  := $(wildcard man/*.[1-8])

.PHONY: FORCE all demo tools tests benches examples fuzz check check-unit check-bats check-fuzz \
        check-man check-san check-tsan bench install uninstall clean

all: tools
tools: $(TOOL_BINS)
tests: $(TEST_BINS) $(EXAMPLE_BINS)
benches: $(BENCH_BINS)
examples: $(EXAMPLE_BINS)

$(B)/%.o: %.c
	@mkdir -p $(@D)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) $(WARN) -MMD -MP -c -o $@ $<

$(B)/version.txt: FORCE
	@mkdir -p $(@D)
	@echo '$(XPRT_VERSION)' | cmp -s - $@ || echo '$(XPRT_VERSION)' > $@
$(B)/lib/core/version.o: $(B)/version.txt
$(B)/lib/core/version.o: CPPFLAGS += -DXPRT_VERSION='"$(XPRT_VERSION)"'
FORCE:

$(LIB): $(LIB_OBJ)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ && $(AR) rcs $@ $^

# Every cmd/<tool>/*.c links into one binary named <tool>.
.SECONDEXPANSION:
$(TOOL_BINS): $(B)/%: $$(addprefix $(B)/,$$(subst .c,.o,$$(wildcard cmd/$$*/*.c))) $(LIB)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(LIB) $(LDLIBS)

# rtrs-client map talks to the kernel's nbd driver over generic netlink
# through libnl (as nbd-client does)
NL_CFLAGS := $(shell pkg-config --cflags libnl-genl-3.0 2>/dev/null || echo -I/usr/include/libnl3)
NL_LIBS   := $(shell pkg-config --libs libnl-genl-3.0 2>/dev/null || echo -lnl-genl-3 -lnl-3)
$(B)/cmd/rtrs-client/map.o: CPPFLAGS += $(NL_CFLAGS)
$(B)/rtrs-client: LDLIBS += $(NL_LIBS)
# and (map --ublk) to the kernel's ublk driver through io_uring (liburing)
$(B)/rtrs-client: LDLIBS += -luring

$(B)/tests/%: $(B)/tests/unit/%.o $(LIB)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(LIB) $(LDLIBS) -lcmocka

# the programming examples of doc/examples (ports, seed 001)
$(B)/examples/%: $(B)/doc/examples/%.o $(LIB)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(LIB) $(LDLIBS)

$(B)/bench/%: $(B)/bench/%.o $(LIB)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(LIB) $(LDLIBS) -lm

# Fuzz targets: clang libFuzzer with ASan+UBSan.  The library is compiled
# once for all of them (coverage-instrumented, without libFuzzer's main),
# and each target links what it uses from that archive.
FUZZ_CC     ?= clang
FUZZ_FLAGS  := -g -O1 -fsanitize=fuzzer,address,undefined $(CPPFLAGS)
FUZZ_OBJ    := $(LIB_SRC:%.c=build-fuzz/%.o)
fuzz: $(FUZZ_BINS)
build-fuzz/lib/%.o: lib/%.c
	@mkdir -p $(@D)
	@$(if $(Q),echo "  FUZZCC  $<")
	$(Q)$(FUZZ_CC) -g -O1 -fsanitize=fuzzer-no-link,address,undefined $(CPPFLAGS) -MMD -MP \
		-c -o $@ $<
build-fuzz/libxprt.a: $(FUZZ_OBJ)
	$(Q)rm -f $@ && ar rcs $@ $^
build-fuzz/%: tests/fuzz/%.c build-fuzz/libxprt.a $(wildcard lib/*/*.h)
	@mkdir -p $(@D)
	@$(if $(Q),echo "  FUZZ    $@")
	$(Q)$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ $< build-fuzz/libxprt.a $(LDLIBS)

check: tools tests
	$(Q)tests/run-all

demo: tools
	$(Q)B=$(B) demo/demo.sh

check-unit: tests
	$(Q)tests/run-all unit
check-bats: tools
	$(Q)tests/run-all bats
check-fuzz:
	$(Q)tests/run-all fuzz
check-man:
	$(Q)tests/run-all man
check-san:
	$(Q)tests/run-all san
check-tsan:
	$(Q)tests/run-all tsan

bench: tools benches
	$(Q)bench/run
	$(Q)bench/xprobe-run
	$(Q)bench/ibcache-run
	$(Q)bench/rtrs-run

install: tools
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 755 $(TOOL_BINS) $(DESTDIR)$(PREFIX)/bin/
	ln -sf mkshmcon $(DESTDIR)$(PREFIX)/bin/rmshmcon
	for m in $(MANPAGES); do s=$${m##*.}; install -d $(DESTDIR)$(PREFIX)/share/man/man$$s; \
	  install -m 644 $$m $(DESTDIR)$(PREFIX)/share/man/man$$s/; done
	ln -sf mkshmcon.8 $(DESTDIR)$(PREFIX)/share/man/man8/rmshmcon.8
	install -d $(DESTDIR)$(COMPLETIONS)
	install -m 644 completions/xprt.bash $(DESTDIR)$(COMPLETIONS)/mkshmcon
	for t in $(filter-out mkshmcon,$(TOOLS)) rmshmcon; do \
	  ln -sf mkshmcon $(DESTDIR)$(COMPLETIONS)/$$t; done
	install -d $(DESTDIR)$(UNITDIR) $(DESTDIR)$(DOCDIR)/examples
	for u in systemd/*.service.in; do n=$${u##*/}; \
	  sed 's|@BINDIR@|$(PREFIX)/bin|g' $$u > $(DESTDIR)$(UNITDIR)/$${n%.in}; \
	  chmod 644 $(DESTDIR)$(UNITDIR)/$${n%.in}; done
	install -m 644 examples/* $(DESTDIR)$(DOCDIR)/examples/

uninstall:
	rm -f $(TOOLS:%=$(DESTDIR)$(PREFIX)/bin/%) $(DESTDIR)$(PREFIX)/bin/rmshmcon \
	      $(DESTDIR)$(PREFIX)/share/man/man8/rmshmcon.8 \
	      $(TOOLS:%=$(DESTDIR)$(COMPLETIONS)/%) $(DESTDIR)$(COMPLETIONS)/rmshmcon \
	      $(patsubst systemd/%.in,$(DESTDIR)$(UNITDIR)/%,$(wildcard systemd/*.service.in))
	rm -rf $(DESTDIR)$(DOCDIR)/examples
	for m in $(MANPAGES); do s=$${m##*.}; rm -f $(DESTDIR)$(PREFIX)/share/man/man$$s/$${m##*/}; done

clean:
	rm -rf build build-san build-tsan build-fuzz build-stamps build-clang

.SECONDARY:

-include $(shell find $(B) -name '*.d' 2>/dev/null)
ifneq ($(filter fuzz build-fuzz/%,$(MAKECMDGOALS)),)
-include $(shell find build-fuzz -name '*.d' 2>/dev/null)
endif
