# emmy — build, dependencies and tests. `make` builds ./emmy; `make test` installs what is missing, builds
# and runs every test that needs no GPU; `make demo` runs the main job on the default model.
CC        ?= cc
MULTIARCH := $(shell $(CC) -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
LIBDIR    := /usr/lib/$(MULTIARCH)
VERSION   := 0.1.0
GIT_REV   := $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)$(shell git diff --quiet HEAD -- 2>/dev/null || echo -dirty)

WARN      := -Wall -Wextra -Werror -Wno-unused-parameter -Wno-missing-field-initializers -Wno-format-truncation
CFLAGS    ?= -O2 -g
ALL_CFLAGS = -std=c11 -D_GNU_SOURCE $(WARN) $(CFLAGS) -I/usr/include/luajit-2.1 -Isrc -MMD -MP
STATIC    := $(LIBDIR)/libluajit-5.1.a $(LIBDIR)/liblua5.1-cjson.a $(LIBDIR)/libsqlite3.a $(LIBDIR)/libpcre2-8.a \
             $(LIBDIR)/libutf8proc.a $(LIBDIR)/libevent_extra.a $(LIBDIR)/libevent_core.a
LDLIBS    := $(STATIC) -lm -ldl -lpthread

CORE_SRC  := $(filter-out src/main.c,$(wildcard src/*.c)) $(wildcard src/lua_bindings/*.c)
B         ?= build
CORE_OBJ  := $(CORE_SRC:%.c=$(B)/%.o)
UNIT_SRC  := $(wildcard tests/c/*.c)

DEB_PKGS  := gcc make libluajit-5.1-dev lua-cjson-dev libsqlite3-dev libpcre2-dev libutf8proc-dev libevent-dev python3 python3-numpy python3-torch
# the tests also render the bench page (kernels.html) in headless Chromium
TEST_PKGS := chromium nodejs npm slurm-wlm munge

.PHONY: all deps test test-gpu asan test-asan clean demo

all: emmy

emmy: $(B)/src/main.o $(CORE_OBJ) $(STATIC)
	$(CC) $(ALL_CFLAGS) -o $@ $(B)/src/main.o $(CORE_OBJ) $(LDLIBS)

$(B)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

# The revision is baked into one object; it is rebuilt whenever the revision string changes.
$(B)/src/version.o: $(B)/version.stamp
$(B)/version.stamp: FORCE
	@mkdir -p $(B)
	@echo '$(VERSION) $(GIT_REV)' | cmp -s - $@ || echo '$(VERSION) $(GIT_REV)' > $@
$(B)/src/version.o: ALL_CFLAGS += -DEM_VERSION='"$(VERSION)"' -DEM_GIT_REV='"$(GIT_REV)"'
FORCE:
# CUPTI's record layout comes from the toolkit's header (libcupti itself is opened with dlopen); its directory
# goes first so that <cuda.h> there is the toolkit's, not src/cuda.h
CUDA_HOME ?= /usr/local/cuda
$(B)/src/cupti.o: ALL_CFLAGS := -I$(CUDA_HOME)/include $(ALL_CFLAGS)

$(STATIC):
	@echo "emmy: $@ is missing; run 'make deps' (installs: $(DEB_PKGS))" >&2; exit 1

tests/unit: $(UNIT_SRC) $(CORE_OBJ) tests/c/unit.h
	$(CC) $(ALL_CFLAGS) -Itests/c -o $@ $(UNIT_SRC) $(CORE_OBJ) $(LDLIBS)

deps:
	@sh tools/deps.sh $(DEB_PKGS)

test: deps
	@sh tools/deps.sh $(TEST_PKGS) || echo "emmy: the page, tokenizer and SLURM tests will be skipped without $(TEST_PKGS)" >&2
	@$(MAKE) --no-print-directory emmy tests/unit
	@$(MAKE) --no-print-directory asan
	@sh tests/run.sh

test-gpu: emmy
	@sh tests/gpu/run.sh

asan:
	@$(MAKE) --no-print-directory B=build-asan CFLAGS='-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined' emmy-asan

emmy-asan: $(B)/src/main.o $(CORE_OBJ)
	$(CC) $(ALL_CFLAGS) -o $@ $(B)/src/main.o $(CORE_OBJ) $(LDLIBS)

test-asan: deps asan
	@EMMY_BIN=./emmy-asan sh tests/run.sh --lua-only

demo: deps
	@$(MAKE) --no-print-directory emmy
	./emmy scripts/workflows/tune_model.lua --model Qwen/Qwen3-Embedding-0.6B

clean:
	rm -rf build build-asan emmy emmy-asan tests/unit

-include $(shell find $(B) -name '*.d' 2>/dev/null)
