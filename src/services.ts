export interface Services {}
