/* SPDX-License-Identifier: Apache-2.0 */
#include "handles.h"

#include <pthread.h>
#include <stdlib.h>

typedef struct entry {
    void *p;
    fg_handle_kind kind;
    int users;  /* calls holding it */
    bool dying; /* fg_handle_remove is waiting for its users */
} entry;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t released = PTHREAD_COND_INITIALIZER;
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
        entries[n_entries++] = (entry){p, kind, 0, false};
    pthread_mutex_unlock(&lock);
    return rc;
}

/* The entry of p (any kind), or NULL. Lock held. Compares addresses only: a freed handle's
 * memory is never read. */
static entry *find(const void *p)
{
    for (int i = 0; i < n_entries; i++)
        if (entries[i].p == p)
            return &entries[i];
    return NULL;
}

bool fg_handle_live(const void *p, fg_handle_kind kind)
{
    if (!p)
        return false;
    pthread_mutex_lock(&lock);
    entry *e = find(p);
    bool live = e && e->kind == kind && !e->dying;
    pthread_mutex_unlock(&lock);
    return live;
}

bool fg_handle_acquire(const void *p, fg_handle_kind kind)
{
    if (!p)
        return false;
    pthread_mutex_lock(&lock);
    entry *e = find(p);
    bool live = e && e->kind == kind && !e->dying;
    if (live)
        e->users++;
    pthread_mutex_unlock(&lock);
    return live;
}

void fg_handle_release(const void *p)
{
    pthread_mutex_lock(&lock);
    entry *e = find(p);
    if (e && --e->users == 0)
        pthread_cond_broadcast(&released);
    pthread_mutex_unlock(&lock);
}

int fg_handle_remove(void *p, fg_handle_kind kind, const void *(*owner)(const void *layer))
{
    if (!p)
        return -1;
    pthread_mutex_lock(&lock);
    entry *e = find(p);
    if (!e || e->kind != kind || e->dying) {
        pthread_mutex_unlock(&lock);
        return -1;
    }
    e->dying = true;
    /* the array may move while we wait (adds, removals): look p up again each time */
    while ((e = find(p)) != NULL && e->users > 0)
        pthread_cond_wait(&released, &lock);
    int layers = 0;
    for (int i = 0; owner && i < n_entries; i++)
        if (entries[i].kind == FG_HANDLE_LAYER && owner(entries[i].p) == p)
            layers++;
    if (layers) {
        e->dying = false;
    } else {
        *e = entries[--n_entries];
    }
    pthread_mutex_unlock(&lock);
    return layers;
}
