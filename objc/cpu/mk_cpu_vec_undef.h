// mk_cpu_vec_undef.h: ends mk_cpu_vec_impl.h's helpers (see there).
#undef VF
#undef VI
#undef SPLAT
#undef LD
#undef ST
#undef RV_MAXSTEP
#undef HSUM
#undef RV_LANES
#undef EXP_NONPOS
#undef RECIP
