/* mapfile.c - files mapped read-only (safetensors checkpoints are read in place). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "gt.h"

int gt_map_file(const char *path, gt_mapped *out, char *err) {
  struct stat st;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  out->data = NULL, out->size = 0;
  if (fd < 0) { snprintf(err, 256, "%s", strerror(errno)); return GT_ERR; }
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    int e = errno, got = fstat(fd, &st) == 0;
    snprintf(err, 256, "%s", !got ? strerror(e) : S_ISDIR(st.st_mode) ? "it is a directory" : "not a regular file");
    close(fd);
    return GT_ERR;
  }
  if (st.st_size > 0) {
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) { snprintf(err, 256, "cannot map it: %s", strerror(errno)); close(fd); return GT_ERR; }
    out->data = p, out->size = (uint64_t)st.st_size;
  }
  close(fd);
  return GT_OK;
}

void gt_unmap(gt_mapped *m) {
  if (m->data) munmap((void *)m->data, (size_t)m->size);
  m->data = NULL, m->size = 0;
}
