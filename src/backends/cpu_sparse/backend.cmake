# cpu_sparse builds on cpu_mla's layer (SparseMlaImpl derives from its MlaImpl).
set(ATTN_BACKEND_USES cpu_mla)
