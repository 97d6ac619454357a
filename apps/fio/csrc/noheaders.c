/*
 * The engine built without fio's headers (build.rs found none: FIO_SRC
 * unset and no scripts/fetch-fio-src.sh cache). The crate still builds,
 * and the library says so when fio loads it, instead of failing with a
 * missing-symbol message.
 */
#include <stdio.h>

#pragma weak fio_version_string
extern const char fio_version_string[];

void bk_log(const char *msg)
{
	fprintf(stderr, "%s\n", msg);
}

/* fio then reports the engine as not loadable, after the message below. */
void bk_get_ioengine(void **ops)
{
	*ops = NULL;
}

__attribute__((constructor)) static void bk_load(void)
{
	if (fio_version_string)
		fprintf(stderr, "bdevkit fio engine: built without fio headers, cannot run in %s: "
				"run scripts/fetch-fio-src.sh and rebuild it (see doc/fio.md)\n",
			fio_version_string);
}
