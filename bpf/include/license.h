/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * license.h — the license every Stator BPF object declares to the kernel.
 *
 * The sources are dual-licensed, GPL-2.0-only OR Apache-2.0 (their SPDX lines). The kernel
 * reads an object's "license" section to decide whether it may call GPL-only helpers
 * (bpf_fib_lookup, bpf_redirect_map, bpf_ktime_get_coarse_ns, ...): license_is_gpl_compatible()
 * in include/linux/license.h accepts exactly "GPL", "GPL v2", "GPL and additional rights",
 * "Dual BSD/GPL", "Dual MIT/GPL" and "Dual MPL/GPL". None of them names Apache-2.0, so no
 * string can name both halves; a program loaded into the kernel is used under the GPL half,
 * and "GPL v2" names that half exactly (GPL-2.0-only; "GPL" would mean version 2 or later).
 * "Dual BSD/GPL", used before, claimed a BSD license the sources do not grant.
 *
 * crates/stator-xdp/src/objects.rs checks that every compiled object carries this string and
 * that every source's SPDX line is the one above.
 */
#ifndef STATOR_LICENSE_H
#define STATOR_LICENSE_H

#define STATOR_BPF_LICENSE "GPL v2"

#endif /* STATOR_LICENSE_H */
