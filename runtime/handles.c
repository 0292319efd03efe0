#include "handles.h"

#include <pthread.h>
#include <stdlib.h>

typedef struct entry {
    void *p;
    fg_handle_kind kind;
} entry;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static entry *entries;
static int n_entries, cap_entries;

int fg_handle_add(void *p, fg_handle_kind kind)
{
    pthread_mutex_lock(&lock);
    int rc = 0;
    if (n_entries == cap_entries) {
        int cap = cap_entries ? 2 * cap_entries : 16;
        entry *e = realloc(entries, sizeof *e * (size_t)cap);
        if (!e)
            rc = -1;
        else {
            entries = e;
            cap_entries = cap;
        }
    }
    if (rc == 0)
        entries[n_entries++] = (entry){p, kind};
    pthread_mutex_unlock(&lock);
    return rc;
}

bool fg_handle_live(const void *p, fg_handle_kind kind)
{
    if (!p)
        return false;
    pthread_mutex_lock(&lock);
    bool live = false;
    for (int i = 0; i < n_entries && !live; i++)
        live = entries[i].p == p && entries[i].kind == kind;
    pthread_mutex_unlock(&lock);
    return live;
}

bool fg_handle_remove(void *p, fg_handle_kind kind)
{
    pthread_mutex_lock(&lock);
    bool found = false;
    for (int i = 0; i < n_entries; i++)
        if (entries[i].p == p && entries[i].kind == kind) {
            entries[i] = entries[--n_entries];
            found = true;
            break;
        }
    pthread_mutex_unlock(&lock);
    return found;
}

int fg_handle_count_layers_of(const void *ctx, const void *(*owner)(const void *layer))
{
    pthread_mutex_lock(&lock);
    int n = 0;
    for (int i = 0; i < n_entries; i++)
        if (entries[i].kind == FG_HANDLE_LAYER && owner(entries[i].p) == ctx)
            n++;
    pthread_mutex_unlock(&lock);
    return n;
}
